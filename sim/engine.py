"""One simulated model server: vLLM-style continuous batching on a virtual clock.

Each step schedules every running decode first (one token each), then spends the rest of the token
budget on prefill chunks — running prefills first, then waiting requests in arrival order while slots,
budget and KV blocks allow (a waiting request that does not fit blocks the ones behind it). A decode
that needs a new block when none is left preempts the newest running request, whose blocks are freed
and which is recomputed later (prompt plus the tokens it had generated). The step time comes from the
server's :class:`~sim.profile.ServerProfile`.

Speed: while only decodes run and nothing arrives, the batch does not change, so the engine plans a
*segment* of identical decode steps (until the first sequence finishes or free blocks could run out)
and jumps over it in closed form: step ``i`` lasts ``α + β·i`` because the context grows by one token
per sequence per step. Per-sequence decode state is kept lazily (a global decode-step counter, one
heap of finish steps, block needs counted by ``kv mod 16`` phase), so an event costs O(log n), not
O(batch). Noise, when the profile has it, is drawn once per segment.

Time semantics: ``clock`` is the start of the next step that has not been committed. A request
submitted at ``t`` joins the first step that starts at or after ``t``. A change of speed or of KV capacity
made at ``t`` applies from the first step planned at or after ``t`` (a step under way finishes as planned).

A KV capacity that shrinks (say, another model loaded beside this one) first drops the cached blocks
without users, then preempts the newest running requests until the ones left fit, as running out of
blocks does; a waiting request that could never fit the new capacity is dropped.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable

from headroom.contract.prompt import BLOCK_TOKENS
from headroom.contract.server_metrics import ServerMetrics
from headroom.sim.kvcache import BlockCache
from headroom.sim.profile import ServerProfile
from headroom.sim.records import Dropped, MetricsSnapshot, Outcome
from headroom.sim.request import SimRequest
from headroom.sim.sequence import SeqState

_IDLE, _SEGMENT, _STEP = 0, 1, 2
_new_tuple = tuple.__new__  # builds a named tuple without its keyword-handling constructor


class ServerEngine:
    """A simulated server. Drive it with :meth:`submit`, :meth:`advance_to` and :meth:`next_wake`;
    collect :attr:`finished` outcomes, :attr:`dropped` requests, :attr:`first_tokens` and, with
    ``early_tpot_tokens`` (k), :attr:`early_tpots`: when a stream's token ``1 + k`` came, by which a router relaying
    it has timed its first ``k`` tokens after the first."""

    __slots__ = ("profile", "server_id", "pool_key", "record_tokens", "max_jump", "clock", "slowdown", "cache",
                 "_type", "_slots", "_memory", "_kv_capacity", "finished", "dropped", "first_tokens",
                 "early_tpot_tokens", "early_tpots", "_early", "prefix_queries", "prefix_hits", "_rng", "_uid", "_running", "_prefilling", "_waiting", "_decoders", "_context", "_g", "_phase",
                 "_finish", "_hit_memo", "_dirty", "_kind", "_k", "_alpha", "_beta", "_step_end", "_chunks",
                 "_step_decoders", "_stream_decoders", "_token_steps")

    def __init__(self, profile: ServerProfile, server_id: str = "server-0", *, pool_key: str = "default",
                 seed: int = 0, record_tokens: bool = False, max_jump: int = 1 << 30, start_s: float = 0.0,
                 early_tpot_tokens: int = 0):
        self.profile = profile
        self.server_id = server_id
        self.pool_key = pool_key
        self.record_tokens = record_tokens
        self.max_jump = max_jump
        self.clock = start_s
        self.slowdown = 1.0
        self.cache = BlockCache(profile.kv_blocks)
        self._kv_capacity: int | None = None  # a capacity to take at the next planning, then None
        self._type, self._slots, self._memory = profile.name, profile.max_num_seqs, profile.memory_used_bytes
        self.finished: list[Outcome] = []
        self.dropped: list[Dropped] = []
        self.first_tokens: list[tuple[SimRequest, float]] = []  # (request, time of its first token)
        self.early_tpot_tokens = early_tpot_tokens  # 0: none timed
        self.early_tpots: list[tuple[SimRequest, float]] = []  # (stream, time of its token 1 + early_tpot_tokens)
        self._early: list[tuple[int, int, int, SeqState]] = []  # (decode step of that token, uid, epoch, seq)
        self.prefix_queries = 0
        self.prefix_hits = 0
        self._rng = random.Random(seed)
        self._uid = 0
        self._running: dict[int, SeqState] = {}  # admission order: the last one is the newest
        self._prefilling: dict[int, SeqState] = {}
        self._waiting: deque[SeqState] = deque()
        self._decoders = 0
        self._context = 0
        self._g = 0  # decode steps so far
        self._phase = [0] * BLOCK_TOKENS  # decoders by (kv - g) mod 16: who needs a block at which step
        self._finish: list[tuple[int, int, int, SeqState]] = []  # (finish step, uid, epoch, seq)
        self._hit_memo: tuple[SeqState | None, int, int] = (None, 0, 0)
        self._dirty = True
        self._kind = _IDLE
        self._k = 0
        self._alpha = self._beta = 0.0  # segment step i lasts alpha + beta*i seconds
        self._step_end = 0.0
        self._chunks: list[tuple[SeqState, int]] = []
        self._step_decoders = 0
        self._stream_decoders = 0  # decoders of streaming requests: their tokens are seen by the router
        self._token_steps: list[float] = []  # end times of the last steps that streamed a token (at most 3)

    # -- public surface -------------------------------------------------------------------------------

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def busy(self) -> bool:
        return bool(self._running or self._waiting)

    def submit(self, request: SimRequest, now: float) -> bool:
        """Queue ``request`` arriving at ``now``; False (and a :class:`Dropped` entry) if it can never fit."""
        self.advance_to(now)
        blocks = -(-(request.prompt_tokens + request.output_tokens) // BLOCK_TOKENS)
        capacity = self.kv_capacity
        if blocks > capacity:
            self.dropped.append(Dropped(request, self.server_id, now,
                                        f"needs {blocks} KV blocks, server has {capacity}"))
            return False
        self._uid += 1
        self._waiting.append(SeqState(request, self._uid, now))
        if self._kind != _STEP or self._dirty:
            self._dirty = True
        return True

    def newest_submitted(self) -> SeqState:
        """The engine's live state of the request submitted last (``first_token_s`` is set once it has one)."""
        return self._waiting[-1]

    def advance_to(self, t: float) -> None:
        """Commit every step that starts before ``t``; an idle server just moves its clock to ``t``."""
        while self.clock < t:
            kind = self._plan() if self._dirty else self._kind
            if kind == _IDLE:
                self.clock = t
                return
            if kind == _STEP:
                self._commit_step()
            else:
                self._commit_decodes(self._steps_before(t - self.clock))

    def next_wake(self, now: float) -> float | None:
        """When this server next needs :meth:`advance_to`: the end of its planned work, or ``clock`` when
        the next step's batch is decided then. None when idle."""
        if self._dirty:
            if self.clock > now:
                return self.clock
            self._plan()
        if self._kind == _IDLE:
            return None
        if self._kind == _STEP:
            return self._step_end
        return self.clock + self._span(self._k)

    def early_tpots_by(self, now: float) -> None:
        """Add to :attr:`early_tpots` those that came by ``now`` inside the planned decode segment: a router relaying
        the streams has seen them, though the segment is committed only at its end."""
        if self._early and self._kind == _SEGMENT and not self._dirty:
            g, start = self._g, self.clock
            self._early_tpots_by(g + self._k, lambda step: start + self._span(step - g), now)

    def streamed_steps(self, now: float) -> tuple[float, ...]:
        """End times (oldest first) of the last two steps before ``now`` that streamed a token to a client:
        what a router relaying this server's streams has seen of its step rhythm."""
        ends = [t for t in self._token_steps if t <= now]
        horizon = now - self.clock
        if self._kind == _SEGMENT and not self._dirty and horizon > 0 and self._stream_decoders:
            done = self._steps_before(horizon)  # steps of the planned segment that start before now
            if self._span(done) > horizon:
                done -= 1
            ends += [self.clock + self._span(i) for i in range(max(1, done - 1), done + 1)]
        return tuple(ends[-2:])

    def stream_progress(self, now: float) -> list[tuple[str, float, int, float]]:
        """``(request id, first token time, tokens so far, last token time)`` of every streaming request
        decoding at ``now``: what a router relaying their streams has seen of them."""
        done, last = 0, self.clock
        horizon = now - self.clock
        if self._kind == _SEGMENT and not self._dirty and horizon > 0:
            done = self._steps_before(horizon)
            if self._span(done) > horizon:
                done -= 1
            last = self.clock + self._span(done)
        g = self._g + done
        return [(seq.request.request_id, seq.first_token_s, tokens, last if tokens > 1 else seq.first_token_s)
                for seq in self._running.values()
                if seq.decoding and seq.request.stream and seq.first_token_s is not None  # set once decoding
                for tokens in (seq.gen_join + g - seq.g_join,)]

    def set_slowdown(self, factor: float, now: float) -> None:
        """Make every later step ``factor`` times slower (1: back to normal)."""
        if factor <= 0:
            raise ValueError(f"slowdown factor must be positive, got {factor}")
        self.advance_to(now)
        self.slowdown = factor
        if self._kind == _SEGMENT:
            self._dirty = True

    @property
    def kv_capacity(self) -> int:
        """KV blocks the server has (or will have from its next step, after :meth:`set_kv_capacity`)."""
        return self.cache.capacity if self._kv_capacity is None else self._kv_capacity

    def set_kv_capacity(self, blocks: int, now: float) -> None:
        """Give the server ``blocks`` KV blocks from its next step on (see the module docstring)."""
        if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
            raise ValueError(f"KV capacity must be a positive number of blocks, got {blocks!r}")
        self.advance_to(now)
        self._kv_capacity = blocks
        if self._kind != _STEP:
            self._dirty = True

    def prefix_match(self, request: SimRequest) -> float:
        """Fraction of the request's prompt whose blocks are in this server's cache now (0-1)."""
        if not request.prefix_hashes:
            return 0.0
        return min(1.0, self.cache.match(request.prefix_hashes) * BLOCK_TOKENS / request.prompt_tokens)

    def snapshot(self, now: float) -> MetricsSnapshot:
        """The server's metrics at ``now`` (between commits, the KV usage of a decode segment is
        interpolated from the steps that have started)."""
        used = self.cache.used
        if self._kind == _SEGMENT and not self._dirty and now > self.clock:
            used += self._blocks_needed(self._steps_before(now - self.clock))
        running, waiting = len(self._running), len(self._waiting)
        usage = used / self.cache.capacity
        return MetricsSnapshot(self.server_id, self._type, self.pool_key, now, ServerMetrics(
            num_waiting=waiting, num_running=running, kv_cache_usage=usage if usage < 1.0 else 1.0,
            prefix_cache_queries=self.prefix_queries, prefix_cache_hits=self.prefix_hits,
            prefill_backlog=waiting + len(self._prefilling), slots_used=running / self._slots,
            memory_used_bytes=self._memory))

    def fork(self) -> ServerEngine:
        """An independent copy of this server's state (for what-if simulation, e.g. an oracle)."""
        twin = object.__new__(ServerEngine)
        for name in ServerEngine.__slots__:
            setattr(twin, name, getattr(self, name))
        clones = {uid: seq.clone() for uid, seq in self._running.items()}
        twin.cache = self.cache.copy()
        twin.finished, twin.dropped, twin.first_tokens, twin.early_tpots = [], [], [], []
        twin._token_steps = list(self._token_steps)
        twin._rng = random.Random()
        twin._rng.setstate(self._rng.getstate())
        twin._running = clones
        twin._prefilling = {uid: clones[uid] for uid in self._prefilling}
        twin._waiting = deque(seq.clone() for seq in self._waiting)
        twin._phase = list(self._phase)
        twin._finish = [(g, uid, epoch, clones[uid]) for g, uid, epoch, seq in self._finish if uid in clones]
        heapq.heapify(twin._finish)
        twin._early = [(g, uid, epoch, clones[uid]) for g, uid, epoch, seq in self._early if uid in clones]
        heapq.heapify(twin._early)
        twin._chunks = [(clones[seq.uid], n) for seq, n in self._chunks if seq.uid in clones]
        return twin

    # -- planning -------------------------------------------------------------------------------------

    def _plan(self) -> int:
        self._dirty = False
        if self._kv_capacity is not None:
            self._resize_cache(self._kv_capacity)
        if self._prefilling or (self._waiting and self._head_fits()):
            self._kind = _STEP
            self._plan_step()
        elif self._decoders:
            k = self._finish_top() - self._g
            blocks = self._block_steps()
            if blocks < k:
                k = blocks
            if self.max_jump < k:
                k = self.max_jump
            if k <= 0:
                self._kind = _STEP
                self._plan_step()
            else:
                p, f = self.profile, self._factor()
                self._kind, self._k = _SEGMENT, k
                self._alpha = (p.a_ms + p.c_ms_per_decode_seq * self._decoders
                               + p.d_ms_per_context_token * self._context) * f / 1000.0
                self._beta = p.d_ms_per_context_token * self._decoders * f / 1000.0
        else:
            self._kind = _IDLE
        return self._kind

    def _factor(self) -> float:
        sigma = self.profile.noise
        if sigma:
            return self.slowdown * self._rng.lognormvariate(-sigma * sigma / 2.0, sigma)
        return self.slowdown

    def _head_fits(self) -> bool:
        """Whether the first waiting request could start prefilling now (conservative about hits)."""
        budget = self.profile.token_budget - self._decoders
        if budget <= 0 or len(self._running) >= self.profile.max_num_seqs:
            return False
        seq = self._waiting[0]
        hit = self._hit_blocks(seq)
        n = min(seq.target - hit * BLOCK_TOKENS, budget)
        return -(-n // BLOCK_TOKENS) + hit <= self.cache.available()

    def _hit_blocks(self, seq: SeqState) -> int:
        """Cached leading blocks of a waiting request (remembered while nothing is evicted)."""
        hashes = seq.request.prefix_hashes
        if not hashes:
            return 0
        cache = self.cache
        memo = self._hit_memo
        if memo[0] is seq and memo[1] == cache.changes:
            return memo[2]
        hit = cache.match(hashes)
        cap = (seq.target - 1) // BLOCK_TOKENS
        if hit > cap:
            hit = cap
        self._hit_memo = (seq, cache.changes, hit)
        return hit

    def _finish_top(self) -> int:
        heap = self._finish
        while heap[0][2] != heap[0][3].epoch or not heap[0][3].decoding:
            heapq.heappop(heap)
        return heap[0][0]

    def _blocks_needed(self, steps: int) -> int:
        """New blocks the decoders need over the next ``steps`` decode steps."""
        full, rest = divmod(steps, BLOCK_TOKENS)
        need = full * self._decoders
        g, phase = self._g + full * BLOCK_TOKENS, self._phase
        for t in range(rest):
            need += phase[-(g + t) % BLOCK_TOKENS]
        return need

    def _block_steps(self) -> int:
        """The most decode steps the free blocks cover."""
        available, decoders = self.cache.available(), self._decoders
        cycles = available // decoders
        rest = available - cycles * decoders
        g, phase = self._g + cycles * BLOCK_TOKENS, self._phase
        for t in range(BLOCK_TOKENS):
            need = phase[-(g + t) % BLOCK_TOKENS]
            if need > rest:
                return cycles * BLOCK_TOKENS + t
            rest -= need
        return (cycles + 1) * BLOCK_TOKENS

    def _plan_step(self) -> None:
        """Decide one mixed step's batch now: blocks for decodes, prefill chunks, admissions."""
        p, cache, phase = self.profile, self.cache, self._phase
        while True:
            preempted = False
            need = phase[-self._g % BLOCK_TOKENS] if self._decoders else 0
            while need > cache.available():
                self._preempt_newest()
                preempted = True
                need = phase[-self._g % BLOCK_TOKENS] if self._decoders else 0
            cache.allocate(need)
            decoders = self._decoders
            budget = p.token_budget - decoders
            chunks: list[tuple[SeqState, int]] = []
            prefill, attention = 0, 0.0
            for seq in list(self._prefilling.values()):
                if budget <= 0:
                    break
                n = min(seq.target - seq.kv, budget)
                need = -(-(seq.kv + n) // BLOCK_TOKENS) - seq.blocks
                while need > cache.available() and not decoders and not chunks and seq.uid in self._running:
                    self._preempt_newest()
                    preempted = True
                if seq.uid not in self._running or need > cache.available():
                    break
                cache.allocate(need)
                seq.blocks += need
                chunks.append((seq, n))
                budget -= n
                prefill += n
                attention += n * (seq.kv + n / 2.0)
            if not preempted:
                while self._waiting and budget > 0 and len(self._running) < p.max_num_seqs:
                    seq = self._waiting[0]
                    n = self._admit(seq, budget)
                    if not n:
                        break
                    chunks.append((seq, n))
                    budget -= n
                    prefill += n
                    attention += n * (seq.kv + n / 2.0)
            if chunks or decoders:
                break
        self._chunks, self._step_decoders = chunks, decoders
        ms = p.step_ms(prefill, decoders, self._context, attention)
        self._step_end = self.clock + ms * self._factor() / 1000.0

    def _admit(self, seq: SeqState, budget: int) -> int:
        """Start prefilling the first waiting request if it fits; the tokens scheduled now (0: it does not)."""
        cache, hashes = self.cache, seq.request.prefix_hashes
        hit = self._hit_blocks(seq)
        if hit:
            cache.acquire(hashes[:hit])
        kv = hit * BLOCK_TOKENS
        n = min(seq.target - kv, budget)
        need = -(-(kv + n) // BLOCK_TOKENS) - hit
        if need > cache.available():
            if hit:
                cache.release(hashes[:hit], 0)
            return 0
        cache.allocate(need)
        self._waiting.popleft()
        seq.kv, seq.blocks, seq.held, seq.hashing = kv, hit + need, list(hashes[:hit]), True
        if not seq.queried:
            seq.queried = True
            seq.cached_tokens = kv
            self.prefix_queries += seq.request.prompt_tokens
            self.prefix_hits += kv
        self._running[seq.uid] = seq
        self._prefilling[seq.uid] = seq
        return n

    def _resize_cache(self, blocks: int) -> None:
        self._kv_capacity = None
        while self.cache.used > blocks:
            self._preempt_newest()
        self.cache.resize(blocks)
        self._hit_memo = (None, 0, 0)
        fits: deque[SeqState] = deque()
        for seq in self._waiting:
            need = -(-(seq.request.prompt_tokens + seq.request.output_tokens) // BLOCK_TOKENS)
            if need > blocks:
                self.dropped.append(Dropped(seq.request, self.server_id, self.clock,
                                            f"needs {need} KV blocks, server has {blocks}"))
            else:
                fits.append(seq)
        self._waiting = fits

    def _preempt_newest(self) -> None:
        uid, seq = next(reversed(self._running.items()))
        del self._running[uid]
        if seq.decoding:
            kv, blocks = self._leave_decoders(seq)
            seq.generated = seq.gen_join + self._g - seq.g_join
        else:
            del self._prefilling[uid]
            blocks = seq.blocks
        self.cache.release(seq.held, blocks - len(seq.held))
        seq.held, seq.kv, seq.blocks = [], 0, 0
        seq.target = seq.request.prompt_tokens + seq.generated
        seq.preemptions += 1
        self._waiting.appendleft(seq)

    def _leave_decoders(self, seq: SeqState) -> tuple[int, int]:
        kv = seq.kv_join + self._g - seq.g_join
        self._decoders -= 1
        self._stream_decoders -= seq.request.stream
        self._context -= kv
        self._phase[(seq.kv_join - seq.g_join) % BLOCK_TOKENS] -= 1
        seq.decoding = False
        seq.epoch += 1
        return kv, -(-kv // BLOCK_TOKENS)

    # -- committing -----------------------------------------------------------------------------------

    def _span(self, steps: int) -> float:
        return steps * self._alpha + self._beta * steps * (steps - 1) / 2.0

    def _steps_before(self, horizon: float) -> int:
        """How many of the planned segment's steps start before ``clock + horizon`` (at least one)."""
        alpha, beta, k = self._alpha, self._beta, self._k
        if beta > 0.0:
            lin = alpha - beta / 2.0
            n = math.ceil((-lin + math.sqrt(lin * lin + 2.0 * beta * horizon)) / beta)
        else:
            n = math.ceil(horizon / alpha)
        if n > k:
            n = k
        if n < 1:
            n = 1
        while n > 1 and self._span(n - 1) >= horizon:
            n -= 1
        while n < k and self._span(n) < horizon:
            n += 1
        return n

    def _commit_decodes(self, steps: int) -> None:
        self.cache.allocate(self._blocks_needed(steps))
        start = self.clock
        if self._stream_decoders:
            ends = [start + self._span(i) for i in range(max(1, steps - 2), steps + 1)]
            self._token_steps = (self._token_steps + ends)[-3:]
        if self.record_tokens:
            ends = [start + self._span(i + 1) for i in range(steps)]
            for seq in self._running.values():
                if seq.decoding:
                    seq.times.extend(ends)
        self.clock = start + self._span(steps)
        before = self._g
        self._g += steps
        self._context += self._decoders * steps
        if self._early:
            self._early_tpots_by(self._g, lambda step: start + self._span(step - before))
        if steps >= self._k:
            self._complete_decoders()
            self._dirty = True
        else:
            self._k -= steps
            self._alpha += self._beta * steps

    def _commit_step(self) -> None:
        self.clock = end = self._step_end
        self._dirty = True
        decoders = self._step_decoders
        streamed = self._stream_decoders > 0 and decoders > 0
        if decoders:
            if self.record_tokens:
                for seq in self._running.values():
                    if seq.decoding:
                        seq.times.append(end)
            self._g += 1
            self._context += decoders
            if self._early:
                self._early_tpots_by(self._g, lambda step: end)
            self._complete_decoders()
        for seq, n in self._chunks:
            seq.kv += n
            if seq.hashing:
                self._register_blocks(seq)
            if seq.kv < seq.target:
                continue
            del self._prefilling[seq.uid]
            seq.generated += 1
            if seq.first_token_s is None:
                seq.first_token_s = end
                if seq.request.stream:  # only a streamed first token reaches the router before the end
                    self.first_tokens.append((seq.request, end))
                    streamed = True
            if self.record_tokens:
                seq.times.append(end)
            if seq.generated >= seq.request.output_tokens:
                del self._running[seq.uid]
                self.cache.release(seq.held, seq.blocks - len(seq.held))
                self._finish_seq(seq)
            else:
                self._join_decoders(seq)
        self._chunks = []
        if streamed:
            self._token_steps = (self._token_steps + [end])[-3:]

    def _register_blocks(self, seq: SeqState) -> None:
        hashes, held = seq.request.prefix_hashes, seq.held
        full = min(seq.kv // BLOCK_TOKENS, len(hashes))
        while len(held) < full:
            h = hashes[len(held)]
            if not self.cache.register(h):
                seq.hashing = False
                return
            held.append(h)

    def _join_decoders(self, seq: SeqState) -> None:
        seq.decoding = True
        seq.g_join, seq.kv_join, seq.gen_join = self._g, seq.kv, seq.generated
        self._decoders += 1
        self._stream_decoders += seq.request.stream
        self._context += seq.kv
        self._phase[(seq.kv - self._g) % BLOCK_TOKENS] += 1
        heapq.heappush(self._finish, (self._g + seq.request.output_tokens - seq.generated, seq.uid, seq.epoch, seq))
        timed_at = 1 + self.early_tpot_tokens  # the token by which a stream's early TPOT is timed
        if self.early_tpot_tokens and seq.request.stream and seq.generated < timed_at <= seq.request.output_tokens:
            heapq.heappush(self._early, (self._g + timed_at - seq.generated, seq.uid, seq.epoch, seq))

    def _early_tpots_by(self, last_step: int, time_of: Callable[[int], float], by: float = math.inf) -> None:
        """Record the streams whose early TPOT is timed by decode step ``last_step`` and by time ``by``
        (``time_of``: a step's end)."""
        heap = self._early
        while heap and heap[0][0] <= last_step and (end := time_of(heap[0][0])) <= by:
            _, _, epoch, seq = heapq.heappop(heap)
            if epoch == seq.epoch and seq.decoding:
                self.early_tpots.append((seq.request, end))

    def _complete_decoders(self) -> None:
        heap, g = self._finish, self._g
        while heap and heap[0][0] <= g:
            _, uid, epoch, seq = heapq.heappop(heap)
            if epoch != seq.epoch or not seq.decoding:
                continue
            kv, blocks = self._leave_decoders(seq)
            seq.generated = seq.request.output_tokens
            del self._running[uid]
            self.cache.release(seq.held, blocks - len(seq.held))
            self._finish_seq(seq)

    def _finish_seq(self, seq: SeqState) -> None:
        self.finished.append(_new_tuple(Outcome, (
            seq.request, self.server_id, seq.submitted_s, seq.first_token_s, self.clock, seq.generated,
            seq.cached_tokens, seq.preemptions, tuple(seq.times))))
