"""How far each server's latencies have lately departed from what the models predict: learned from its own
streams' first tokens and completions, in seconds, where retraining takes minutes.

A latency model is trained per pool and retrained every so often; one server can change within seconds (a bad
driver, a noisy neighbour, throttling, a smaller KV cache). The router sees every stream's TTFT at its first token
(:meth:`first_token`), its TPOT over its next :data:`EARLY_TPOT_TOKENS` tokens, and every other completion's TPOT
or E2E, next to what the model predicted for it there. A stream's TPOT is learned early because a long answer
streams for minutes, and it is learned once: its first tokens after the first are timed right after the state it
was placed in, which the model priced; later ones would also time how the server's load grew since, which the
model cannot know and a new request's prediction already counts.
:class:`LatencyCorrections` keeps, per server and target, the last :data:`RING` ratios ``actual / predicted``, each
clipped to ``[1 / MAX_FACTOR, MAX_FACTOR]``, and the log of their mean without the highest and the lowest, shrunk
towards 0 while few have been seen: the log factor the server's predictions are multiplied by (:meth:`log_factors`).
A mean, because the models predict one: where a latency scatters widely around its mean (the TPOT of short
streams), a median of ratios would pull every prediction towards the common case and away from what the model is
right about. Without its extremes, because a wild completion (or a forged report) must move nothing. A server that
turned 2× slower is priced 1.5× slower after three of its requests, 1.9× after five (a server first seen, 1.7× after
three).

It fades, so it never outlives what it knew:

- with the time since the server's last completion (half-life ``half_life_s``): a server priced out of traffic
  is tried again, and learns anew whether it recovered;
- by ``version_fade`` when the pool's model of that target changes (:meth:`model_version`): the new model has
  learned part of what the correction held. Ratios measured against an older model are left out.

Beside the corrections, each server's **prefill pace**: how many ms its streams waited for their first token per
prompt token of prefill work at dispatch (the prompts queued ahead of them, :data:`inflight_prefill_tokens`, and
their own uncached part). The models learn TTFT from the queues the pool has shown them; a queue deeper than any
they were trained on is priced as the deepest they saw, and a multiplier learned on short queues cannot stretch
it. The pace can: ``pace × work`` bounds a stream's TTFT from below on any queue (:meth:`prefill_pace`). A sample
counts once its work is at least :data:`PACE_MIN_WORK` tokens (below, fixed costs dominate); the pace is the
lower quartile of the last :data:`RING` samples, so that it bounds rather than predicts, and it fades as the
corrections do.

A server that stalls teaches none of this, as its first tokens do not come; what its streams say while they wait
(:mod:`feedback.first_token_watch`) raises its TTFT factor (:meth:`LatencyCorrections.log_factors`, ``overdue``).

Times are the caller's (monotonic seconds in the router, virtual ones in the simulator).

>>> corrections = LatencyCorrections()
>>> slots = corrections.slots(["s1", "s2"])
>>> def factors(now):
...     return [round(math.exp(f), 2) for f in corrections.log_factors(slots, now)[0]]  # TTFT, per server
>>> for _ in range(3):  # s1 turned 2x slower than its model says
...     corrections.observe("s1", "h100", "ttft", predicted_ms=50.0, actual_ms=100.0, version=1, now=10.0)
>>> factors(now=10.0), factors(now=40.0)  # a half-life later
([1.68, 1.0], [1.3, 1.0])
>>> corrections.model_version("h100", "ttft", 2)  # a new model
>>> factors(now=10.0)
[1.3, 1.0]
>>> for ttft_ms in (300.0, 320.0, 400.0, 280.0):  # s2: 2,000 tokens of prefill ahead of each stream
...     corrections.observe_prefill("s2", ttft_ms, work_tokens=2000, now=10.0)
>>> corrections.prefill_pace(slots, now=10.0).round(2).tolist()  # ms per token of work
[0.0, 0.14]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from headroom.contract.targets import TARGETS

RING = 6  # ratios kept per server and target (12 followed a change at half the pace, and did worse by the worst case)
EARLY_TPOT_TOKENS = 16  # a stream's TPOT is learned over this many tokens after its first, while it runs
TRIM = 4  # from this many ratios on, the highest and the lowest are left out of the mean
MAX_FACTOR = 16.0  # a single ratio counts at most this far from 1 (either way)
PRIOR = 1.0  # shrinkage: the mean counts n / (n + PRIOR), n the ratios observed so far
MAX_SERVERS = 4096  # servers observed at once; one more is left out until another is forgotten
TARGET_INDEX = {target: i for i, target in enumerate(TARGETS)}
_TTFT = TARGET_INDEX["ttft"]
PACE_MIN_WORK = 1024  # prompt tokens of prefill work a pace sample needs
PACE_LEAST = 3  # samples before a server has a pace
MAX_PACE_MS = 100.0  # ms per token: one sample counts at most this (a forged or broken report)


def prefill_work(prompt_tokens: Any, inflight_prefill_tokens: Any, prefix_match: Any) -> Any:
    """Prompt tokens of prefill a request has ahead of its first token on a server: the prompts queued there,
    and its own part not cached (numbers or NumPy columns)."""
    return inflight_prefill_tokens + prompt_tokens * (1.0 - prefix_match)


class LatencyCorrections:
    """Per server (a slot each) and target, the recent ratios actual / predicted and their shrunk trimmed mean."""

    def __init__(self, half_life_s: float = 30.0, version_fade: float = 0.5):
        if not half_life_s > 0 or not 0.0 <= version_fade <= 1.0:
            raise ValueError(f"half_life_s must be positive and version_fade within [0, 1], got {half_life_s!r}, "
                             f"{version_fade!r}")
        self.half_life_s, self.version_fade = half_life_s, version_fade
        self._slot: dict[str, int] = {}
        self._pool: list[str] = []
        self._free: list[int] = []
        self._ratios = np.ones((0, len(TARGETS), RING))  # per slot and target, a ring of ratios
        self._count = np.zeros((0, len(TARGETS)), dtype=np.int64)  # ratios ever added (the ring's next index)
        self._estimate = np.zeros((len(TARGETS), 0))  # the log of the shrunk trimmed mean, per target and slot
        self._at = np.full((len(TARGETS), 0), -math.inf)  # when each was last observed
        self._versions: dict[tuple[str, str], int] = {}  # (pool, target) -> the newest model version seen
        self._observed = False  # any ratio or pace ever: until then all are 0, without reading the columns
        self._paces = np.zeros((0, RING))  # per slot, a ring of ms per token of prefill work
        self._pace_count = np.zeros(0, dtype=np.int64)
        self._pace = np.zeros(0)  # per slot, the lower quartile of its ring (0: none yet)
        self._pace_at = np.full(0, -math.inf)

    def slots(self, server_ids: Sequence[str]) -> np.ndarray:
        """The slots of ``server_ids`` (new servers get empty ones), to read :meth:`log_factors` with."""
        return np.array([self._slot_of(sid) for sid in server_ids], dtype=np.intp)

    def log_factors(self, slots: np.ndarray, now: float, overdue: np.ndarray | None = None) -> np.ndarray:
        """``(len(TARGETS), len(slots))``: the log factor each target's prediction is multiplied by at ``now``; the
        TTFT one at least ``overdue`` where that is above 0 (per slot,
        :meth:`~feedback.first_token_watch.FirstTokenWatch.overdue`)."""
        if not self._observed:
            factors = np.zeros((len(TARGETS), len(slots)))
        else:
            estimate, at = self._estimate[:, slots], self._at[:, slots]
            factors = estimate * np.exp2(np.minimum(0.0, (at - now) / self.half_life_s)) \
                if np.count_nonzero(estimate) else np.zeros_like(estimate)
        if overdue is not None and np.count_nonzero(overdue):
            late = overdue > 0.0
            factors[_TTFT, late] = np.maximum(factors[_TTFT, late], overdue[late])
        return factors

    def log_factors_of(self, server_ids: Sequence[str], now: float) -> np.ndarray:
        """:meth:`log_factors` by server id, without taking a slot for a server never observed (0 for it)."""
        slots = np.array([self._slot.get(sid, -1) for sid in server_ids], dtype=np.intp)
        factors = np.zeros((len(TARGETS), len(slots)))
        known = slots >= 0
        if known.any():
            factors[:, known] = self.log_factors(slots[known], now)
        return factors

    def observe(self, server_id: str, pool_key: str, target: str, predicted_ms: float, actual_ms: float,
                version: int, now: float) -> None:
        """A request the model of ``target`` (``version``) predicted ``predicted_ms`` for on ``server_id`` took
        ``actual_ms``. Values that are not positive and finite, and ratios against an older model, are left out."""
        if not (predicted_ms > 0 and actual_ms > 0 and math.isfinite(predicted_ms) and math.isfinite(actual_ms)):
            return
        t = TARGET_INDEX[target]
        if version < self._versions.get((pool_key, target), version):
            return
        self.model_version(pool_key, target, version)
        if server_id not in self._slot and len(self._slot) >= MAX_SERVERS:
            return
        slot = self._slot_of(server_id)
        self._pool[slot] = pool_key
        ratio = min(max(actual_ms / predicted_ms, 1.0 / MAX_FACTOR), MAX_FACTOR)
        count = int(self._count[slot, t])
        self._ratios[slot, t, count % RING] = ratio
        self._count[slot, t] = count + 1
        self._at[t, slot] = now
        self._estimate[t, slot] = self._trimmed_mean(slot, t)
        self._observed = True

    def first_token(self, server_id: str, pool_key: str, ttft_ms: float, work_tokens: float,
                    predicted_ttft_ms: float | None, version: int | None, now: float) -> None:
        """A stream's first token came ``ttft_ms`` after dispatch, with ``work_tokens`` of prefill ahead of it: the
        server's prefill pace, and its TTFT against the model's prediction (``version``) it was placed with, if any.
        Learned when the first token comes, not when the stream ends: a long answer must not delay what its first
        token already says about the server."""
        self.observe_prefill(server_id, ttft_ms, work_tokens, now)
        if predicted_ttft_ms is not None and version is not None:
            self.observe(server_id, pool_key, "ttft", predicted_ttft_ms, ttft_ms, version, now)

    def observe_prefill(self, server_id: str, ttft_ms: float, work_tokens: float, now: float) -> None:
        """A stream on ``server_id`` got its first token ``ttft_ms`` after dispatch, with ``work_tokens`` of
        prefill to go through first (queued ahead, and its own uncached prompt)."""
        if not (work_tokens >= PACE_MIN_WORK and ttft_ms > 0 and math.isfinite(ttft_ms) and math.isfinite(work_tokens)):
            return
        if server_id not in self._slot and len(self._slot) >= MAX_SERVERS:
            return
        slot = self._slot_of(server_id)
        count = int(self._pace_count[slot])
        self._paces[slot, count % RING] = min(ttft_ms / work_tokens, MAX_PACE_MS)
        self._pace_count[slot] = count = count + 1
        self._pace_at[slot] = now
        if count >= PACE_LEAST:
            samples = np.sort(self._paces[slot, :min(count, RING)])
            self._pace[slot] = samples[(len(samples) - 1) // 4]
            self._observed = True

    def prefill_pace(self, slots: np.ndarray, now: float) -> np.ndarray:
        """Per slot, ms per token of prefill work at ``now`` (0 where none is known)."""
        if not self._observed:
            return np.zeros(len(slots))
        pace, at = self._pace[slots], self._pace_at[slots]
        if not pace.any():
            return np.zeros_like(pace)
        faded: np.ndarray = pace * np.exp2(np.minimum(0.0, (at - now) / self.half_life_s))
        return faded

    def prefill_pace_of(self, server_ids: Sequence[str], now: float) -> np.ndarray:
        """:meth:`prefill_pace` by server id (0 for a server never observed)."""
        slots = np.array([self._slot.get(sid, -1) for sid in server_ids], dtype=np.intp)
        pace = np.zeros(len(slots))
        known = slots >= 0
        if known.any():
            pace[known] = self.prefill_pace(slots[known], now)
        return pace

    def model_version(self, pool_key: str, target: str, version: int) -> None:
        """The pool's model of ``target`` is now ``version``: a newer one fades what its servers' corrections hold."""
        key = (pool_key, target)
        known = self._versions.get(key)
        if known is not None and version <= known:
            return
        self._versions[key] = version
        if known is None or self.version_fade == 1.0:
            return
        t = TARGET_INDEX[target]
        for slot, pool in enumerate(self._pool):
            if pool == pool_key:
                self._ratios[slot, t] **= self.version_fade
                self._estimate[t, slot] *= self.version_fade

    def forget(self, server_id: str) -> None:
        """A server left the pool: its slot is emptied for another."""
        slot = self._slot.pop(server_id, None)
        if slot is None:
            return
        self._ratios[slot], self._count[slot] = 1.0, 0
        self._estimate[:, slot], self._at[:, slot] = 0.0, -math.inf
        self._pace_count[slot], self._pace[slot], self._pace_at[slot] = 0, 0.0, -math.inf
        self._pool[slot] = ""
        self._free.append(slot)

    def _trimmed_mean(self, slot: int, t: int) -> float:
        count = int(self._count[slot, t])
        ratios = np.sort(self._ratios[slot, t, :min(count, RING)])
        if len(ratios) >= TRIM:
            ratios = ratios[1:-1]
        return math.log(float(ratios.mean())) * count / (count + PRIOR)

    def _slot_of(self, server_id: str) -> int:
        slot = self._slot.get(server_id)
        if slot is not None:
            return slot
        if self._free:
            slot = self._free.pop()
        else:
            slot = len(self._pool)
            self._pool.append("")
            if slot >= self._count.shape[0]:
                self._grow(max(8, 2 * slot))
        self._slot[server_id] = slot
        return slot

    def _grow(self, size: int) -> None:
        old = self._count.shape[0]
        self._ratios = np.concatenate((self._ratios, np.ones((size - old, len(TARGETS), RING))))
        self._count = np.concatenate((self._count, np.zeros((size - old, len(TARGETS)), dtype=np.int64)))
        self._estimate = np.concatenate((self._estimate, np.zeros((len(TARGETS), size - old))), axis=1)
        self._at = np.concatenate((self._at, np.full((len(TARGETS), size - old), -math.inf)), axis=1)
        self._paces = np.concatenate((self._paces, np.zeros((size - old, RING))))
        self._pace_count = np.concatenate((self._pace_count, np.zeros(size - old, dtype=np.int64)))
        self._pace = np.concatenate((self._pace, np.zeros(size - old)))
        self._pace_at = np.concatenate((self._pace_at, np.full(size - old, -math.inf)))
