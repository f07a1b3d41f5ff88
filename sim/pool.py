"""The offline pool runner: a discrete-event simulation of a pool of servers on a virtual clock.

:func:`run` feeds a request stream (sorted by arrival) to a pool through a ``pick`` function and
returns every outcome, one :class:`~contract.telemetry.TelemetryRecord` per completed request and the
scraped metrics. The router's knowledge is modelled explicitly: server metrics are scraped every
``scrape_interval_s`` (the view is that stale); in-flight counts are the router's own and always fresh.
With ``routers`` > 1, several router replicas share the pool: each request goes to one of them at random
(as a Service spreads connections), and each sees only its own in-flight requests, the streams it relays
(their TPOT SLOs, the lengths they completed with, their TPOT against its prediction) and, with
``prefix_knowledge="router"``, only the prefixes it sent itself (:mod:`sim.view`).

Autoscaling hooks: ``controller(control)`` is called every ``control_interval_s`` of virtual time and
``actions`` run once at given times; both get a :class:`PoolControl` that can add servers (routable after
their profile's ``load_delay_s``), remove servers (they stop receiving requests, finish what they hold,
then leave), slow servers down, change their KV capacity and read the router's view. Runs repeat exactly for the same inputs and seed.
"""

from __future__ import annotations

import gc
import random
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from heapq import heappop, heappush
from typing import Any

from headroom.contract.targets import trains
from headroom.contract.telemetry import TelemetryRecord
from headroom.errors import HeadroomError
from headroom.feedback.latency_corrections import EARLY_TPOT_TOKENS, prefill_work
from headroom.sim.engine import ServerEngine
from headroom.sim.profile import ServerProfile, profile
from headroom.sim.records import Dropped, MetricsSnapshot, Outcome
from headroom.sim.request import SimRequest
from headroom.sim.results import Dispatched, RunResult, telemetry_record
from headroom.sim.view import Hold, Pick, PickFunction, PoolView, Shed


class SimulationError(HeadroomError, RuntimeError):
    """A run was asked to do something impossible (bad pick, unknown server, unsorted requests)."""


@dataclass(frozen=True)
class SimServerSpec:
    """One server of a pool: its id, type and the pool/variant key its telemetry carries."""

    server_id: str
    profile: ServerProfile
    pool_key: str = ""

    @property
    def key(self) -> str:
        return self.pool_key or self.profile.name


def uniform_pool(n: int, server_type: str | ServerProfile = "h100", prefix: str = "server") -> list[SimServerSpec]:
    """``n`` identical servers named ``{prefix}-0`` … ``{prefix}-{n-1}``."""
    prof = profile(server_type) if isinstance(server_type, str) else server_type
    return [SimServerSpec(f"{prefix}-{i}", prof) for i in range(n)]


class _Server:
    __slots__ = ("spec", "engine", "state", "index", "inflight", "inflight_tokens", "prefill_tokens", "prefilling",
                 "decode_tokens", "tpot_slos", "known", "wake", "version", "snapshot")

    def __init__(self, spec: SimServerSpec, engine: ServerEngine, state: str, routers: int,
                 snapshot: MetricsSnapshot):
        self.spec, self.engine, self.state = spec, engine, state
        self.index = -1
        self.inflight, self.inflight_tokens = [0] * routers, [0] * routers
        self.prefill_tokens, self.decode_tokens = [0] * routers, [0] * routers
        self.prefilling: dict[str, int] = {}  # streaming request id -> prompt tokens, until its first token
        # per router: streaming request id -> the TPOT SLO that router holds it to
        self.tpot_slos: list[dict[str, float]] = [{} for _ in range(routers)]
        self.known: list[set[int]] = [set() for _ in range(routers)]  # prefix blocks each router sent here
        self.wake: float | None = None
        self.version = 0
        self.snapshot = snapshot


_WAKE, _DONE, _READY, _ACTION, _FIRST, _EARLY = 0, 1, 2, 3, 4, 5
_LONGEST_HOLD_S = 3600.0  # a held request still held this long after everything else ended: the pick never lets go


class PoolControl:
    """What a controller or a scheduled action may do to the pool at the current virtual time."""

    def __init__(self, run: _Run):
        self._run = run

    @property
    def now(self) -> float:
        return self._run.now

    def servers(self) -> dict[str, str]:
        """Server id -> state (``loading``, ``ready``, ``draining``, ``removed``)."""
        return {sid: s.state for sid, s in self._run.servers.items()}

    def router_view(self) -> PoolView:
        """The router's view of the routable servers now (its in-flight counts and step rhythm; no request,
        so no prefix matches) — for controllers that model the router's own signals."""
        view = self._run.view
        view.now = self._run.now
        return view

    def snapshots(self) -> list[MetricsSnapshot]:
        """The latest scraped metrics of every server that is loading, ready or draining."""
        return [s.snapshot for s in self._run.servers.values() if s.snapshot is not None and s.state != "removed"]

    def add_server(self, server_type: str | ServerProfile = "h100", server_id: str | None = None,
                   pool_key: str = "") -> str:
        """Start a server; it takes requests after its profile's load delay. Returns its id."""
        return self._run.add_server(server_type, server_id, pool_key)

    def remove_server(self, server_id: str) -> None:
        """Stop routing to a server; it finishes its requests, then leaves."""
        self._run.remove_server(server_id)

    def set_slowdown(self, server_id: str, factor: float) -> None:
        """Make a server ``factor`` times slower from now on."""
        self._run.server(server_id).engine.set_slowdown(factor, self._run.now)
        self._run.schedule(self._run.server(server_id))


    def kv_capacity(self, server_id: str) -> int:
        """The KV blocks a server has (or takes at its next step)."""
        return self._run.server(server_id).engine.kv_capacity

    def set_kv_capacity(self, server_id: str, blocks: int) -> None:
        """Give a server ``blocks`` KV blocks from its next step on (:meth:`sim.engine.ServerEngine.set_kv_capacity`)."""
        self._run.server(server_id).engine.set_kv_capacity(blocks, self._run.now)
        self._run.schedule(self._run.server(server_id))


Controller = Callable[[PoolControl], None]
Action = tuple[float, Controller]


def slow_down(server_id: str, factor: float) -> Controller:
    """An action that slows ``server_id`` down by ``factor`` (a regime change)."""
    return lambda control: control.set_slowdown(server_id, factor)


def run(requests: Sequence[SimRequest], pool: Iterable[SimServerSpec], pick: PickFunction | Sequence[PickFunction], *,
        scrape_interval_s: float = 0.05, seed: int = 0, controller: Controller | None = None,
        control_interval_s: float = 10.0, actions: Iterable[Action] = (), epoch_unix: float = 1_700_000_000.0,
        record_tokens: bool = False, telemetry: bool = True,
        on_record: Callable[[TelemetryRecord], Any] | None = None,
        lengths: Iterable[int] = (), routers: int = 1, prefix_knowledge: str = "cache") -> RunResult:
    """Simulate ``requests`` on ``pool``, routed by ``pick``; see the module docstring.

    ``telemetry=False`` keeps no dispatch features, so ``RunResult.records`` is empty (saves memory on
    long runs that need only outcomes and metrics); ``on_record`` gets each record as its request
    completes; ``record_tokens`` keeps every token's time in the outcomes; ``lengths`` are output lengths of
    streams the router saw complete before the run (every router's view's ``lengths`` start with them).
    ``pick`` may be a list of one pick function per router; ``prefix_knowledge`` is ``cache`` (the servers'
    actual caches) or ``router``.
    """
    simulation = _Run(requests, pool, pick, scrape_interval_s, seed, controller, control_interval_s, actions,
                      epoch_unix, record_tokens, telemetry, on_record, routers, prefix_knowledge)
    for tokens in lengths:
        for view in simulation.views:
            view.lengths.add(tokens)
    collecting = gc.isenabled()
    gc.disable()  # the loop allocates many short-lived tuples and no reference cycles
    try:
        return simulation.loop()
    finally:
        if collecting:
            gc.enable()


class _Run:
    def __init__(self, requests: Sequence[SimRequest], pool: Iterable[SimServerSpec],
                 pick: PickFunction | Sequence[PickFunction], scrape_interval_s: float, seed: int,
                 controller: Controller | None, control_interval_s: float, actions: Iterable[Action],
                 epoch_unix: float, record_tokens: bool, telemetry: bool,
                 on_record: Callable[[TelemetryRecord], Any] | None, routers: int, prefix_knowledge: str):
        if scrape_interval_s <= 0 or control_interval_s <= 0:
            raise SimulationError("scrape_interval_s and control_interval_s must be positive")
        picks = list(pick) if isinstance(pick, Sequence) else [pick] * routers
        if routers < 1 or len(picks) != routers or prefix_knowledge not in ("cache", "router"):
            raise SimulationError(f"{routers} routers need as many pick functions (got {len(picks)}) and "
                                  f"prefix_knowledge cache or router (got {prefix_knowledge!r})")
        self.picks, self.routers, self.own_prefixes = picks, routers, prefix_knowledge == "router"
        self.router_rng = random.Random(f"{seed}:routers")
        self.router_of: dict[str, int] = {}  # request id -> the router that dispatched it
        self.requests = list(requests)
        if any(a.arrival_s > b.arrival_s for a, b in zip(self.requests, self.requests[1:])):
            raise SimulationError("requests must be sorted by arrival_s")
        self.seed = seed
        self.scrape_interval, self.controller, self.control_interval = scrape_interval_s, controller, control_interval_s
        self.epoch, self.record_tokens, self.on_record = epoch_unix, record_tokens, on_record
        self.telemetry = telemetry
        self.now = 0.0
        self.heap: list[tuple[float, int, int, Any, int]] = []
        self.counter = 0
        self.servers: dict[str, _Server] = {}
        self.routable: list[_Server] = []
        self.views = [PoolView() for _ in range(routers)]
        self.view = self.views[0]
        self.control = PoolControl(self)
        self.dispatched: dict[str, Dispatched] = {}
        self.first_token_s: dict[str, float] = {}  # stream id -> its first token's time, until its early TPOT
        self.tpot_learned: set[str] = set()  # streams whose early TPOT was learned
        self.outcomes: list[Outcome] = []
        self.seen: list[Dispatched] = []
        self.dropped: list[Dropped] = []
        self.metrics: list[MetricsSnapshot] = []
        self.held: list[deque[SimRequest]] = [deque() for _ in range(routers)]  # per router, oldest first
        self.freed = False  # a first token or a completion since the held requests were last offered
        for spec in pool:
            self._create(spec, "ready")
        self._reindex()
        for when, action in actions:
            self.push(when, _ACTION, action, 0)

    # -- pool membership ------------------------------------------------------------------------------

    def server(self, server_id: str) -> _Server:
        try:
            return self.servers[server_id]
        except KeyError:
            raise SimulationError(f"no server {server_id!r} in the pool") from None

    def _create(self, spec: SimServerSpec, state: str) -> _Server:
        if spec.server_id in self.servers:
            raise SimulationError(f"server id {spec.server_id!r} is already in the pool")
        engine = ServerEngine(spec.profile, spec.server_id, pool_key=spec.key,
                              seed=zlib.crc32(f"{self.seed}:{spec.server_id}".encode()),
                              record_tokens=self.record_tokens, start_s=self.now, early_tpot_tokens=EARLY_TPOT_TOKENS)
        snapshot = engine.snapshot(self.now)
        if state != "ready":
            snapshot = snapshot._replace(ready=False)
        srv = _Server(spec, engine, state, self.routers, snapshot)
        self.servers[spec.server_id] = srv
        return srv

    def add_server(self, server_type: str | ServerProfile, server_id: str | None, pool_key: str) -> str:
        prof = profile(server_type) if isinstance(server_type, str) else server_type
        if server_id is None:
            n = len(self.servers)
            while f"server-{n}" in self.servers:
                n += 1
            server_id = f"server-{n}"
        srv = self._create(SimServerSpec(server_id, prof, pool_key), "loading")
        self.push(self.now + prof.load_delay_s, _READY, srv, 0)
        return server_id

    def remove_server(self, server_id: str) -> None:
        srv = self.server(server_id)
        if srv.state in ("draining", "removed"):
            return
        srv.state = "draining" if srv.engine.busy or any(srv.inflight) else "removed"
        self._reindex()

    def _reindex(self) -> None:
        self.routable = [s for s in self.servers.values() if s.state == "ready"]
        for i, srv in enumerate(self.routable):
            srv.index = i
        snapshots, engines = [s.snapshot for s in self.routable], [s.engine for s in self.routable]
        for r, view in enumerate(self.views):  # the scraped snapshots are one list, shared
            view.snapshots, view._engines = snapshots, engines
            view.inflight_requests = [s.inflight[r] for s in self.routable]
            view.inflight_prompt_tokens = [s.inflight_tokens[r] for s in self.routable]
            view.inflight_prefill_tokens = [s.prefill_tokens[r] for s in self.routable]
            view.inflight_decode_tokens = [s.decode_tokens[r] for s in self.routable]
            view.running_tpot_slos = [tuple(s.tpot_slos[r].values()) for s in self.routable]
            view._servers_changed()
            view._tpot_slos = [s.tpot_slos[r] for s in self.routable]
            view._known = [s.known[r] for s in self.routable] if self.own_prefixes else None

    # -- events ---------------------------------------------------------------------------------------

    def push(self, when: float, kind: int, payload: Any, version: int) -> None:
        self.counter += 1
        heappush(self.heap, (when, self.counter, kind, payload, version))

    def schedule(self, srv: _Server) -> None:
        """Hand the engine's finished requests to the router and book the server's next wake."""
        engine, now = srv.engine, self.now
        if engine.finished:
            for outcome in engine.finished:
                if outcome.completion_s > now:
                    self.push(outcome.completion_s, _DONE, (srv, outcome), 0)
                else:
                    self._complete(srv, outcome)
            engine.finished.clear()
        if engine.first_tokens:
            for request, first_s in engine.first_tokens:
                if request.request_id not in srv.prefilling:
                    continue
                if first_s > now:
                    self.push(first_s, _FIRST, (srv, request, first_s), 0)
                else:
                    self._first_token(srv, request, first_s)
            engine.first_tokens.clear()
        if engine.early_tpots:
            for request, timed_s in engine.early_tpots:
                if timed_s > now:
                    self.push(timed_s, _EARLY, (request, timed_s), 0)
                else:
                    self._early_tpot(request, timed_s)
            engine.early_tpots.clear()
        if engine.dropped:
            for drop in engine.dropped:
                self._forget(srv, drop.request)
                self.dropped.append(drop)
            engine.dropped.clear()
        wake = engine.next_wake(now)
        if wake is not None and wake != srv.wake:
            srv.version += 1
            srv.wake = wake
            self.counter += 1
            heappush(self.heap, (wake, self.counter, _WAKE, srv, srv.version))

    def _first_token(self, srv: _Server, request: SimRequest, first_s: float) -> None:
        if request.request_id not in srv.prefilling:
            return  # finished or dropped at the instant of its first token, and forgotten already
        self.freed = True
        r = self.router_of[request.request_id]
        srv.prefill_tokens[r] -= srv.prefilling.pop(request.request_id, 0)
        if srv.state == "ready":
            self.views[r].inflight_prefill_tokens[srv.index] = srv.prefill_tokens[r]
        seen = self.dispatched[request.request_id]
        ttft_ms = (first_s - seen.dispatch_s) * 1000.0
        self.views[r].watch.first_token(srv.spec.server_id, request.request_id, ttft_ms)
        self._learn_first_token(self.views[r], srv.spec.server_id, request, seen, ttft_ms)
        self.first_token_s[request.request_id] = first_s

    def _relay_early_tpots(self) -> None:
        """Learn the early TPOTs streamed by now inside decode segments not yet committed."""
        for srv in self.servers.values():
            engine = srv.engine
            engine.early_tpots_by(self.now)
            if engine.early_tpots:
                for request, timed_s in engine.early_tpots:
                    self._early_tpot(request, timed_s)
                engine.early_tpots.clear()

    def _early_tpot(self, request: SimRequest, timed_s: float) -> None:
        """As the router learns from a stream's first tokens after its first (``RouterService.streamed``): its TPOT
        against the model's prediction."""
        first_s = self.first_token_s.pop(request.request_id, None)
        if first_s is None:
            return  # finished or dropped, and forgotten already
        self.tpot_learned.add(request.request_id)
        seen = self.dispatched[request.request_id]
        pick = seen.decision if type(seen.decision) is Pick else None
        version = None if pick is None or pick.model_versions is None else pick.model_versions.get("tpot")
        if pick is not None and pick.predicted_tpot_ms is not None and version is not None:
            self.views[self.router_of[request.request_id]].corrections.observe(
                pick.server_id, seen.pool_key, "tpot", pick.predicted_tpot_ms,
                (timed_s - first_s) * 1000.0 / EARLY_TPOT_TOKENS, version, self.now)

    def _learn_first_token(self, view: PoolView, server_id: str, request: SimRequest, seen: Dispatched,
                           ttft_ms: float) -> None:
        """As the router learns from a stream's first token (``RouterService.streamed``): the server's prefill pace
        and the TTFT against the model's prediction."""
        state, pick = seen.state, seen.decision if type(seen.decision) is Pick else None
        work = prefill_work(request.prompt_tokens, state.inflight_prefill_tokens, state.prefix_match)
        version = None if pick is None or pick.model_versions is None else pick.model_versions.get("ttft")
        view.corrections.first_token(server_id, seen.pool_key, ttft_ms, work,
                                     None if pick is None else pick.predicted_ttft_ms, version, self.now)

    def _forget(self, srv: _Server, request: SimRequest) -> int:
        """Drop a finished or dropped request from its router's accounting; the router that dispatched it."""
        self.dispatched.pop(request.request_id, None)
        self.first_token_s.pop(request.request_id, None)
        self.tpot_learned.discard(request.request_id)
        r = self.router_of.pop(request.request_id)
        self.views[r].watch.ended(srv.spec.server_id, request.request_id)
        srv.inflight[r] -= 1
        srv.inflight_tokens[r] -= request.prompt_tokens
        srv.prefill_tokens[r] -= srv.prefilling.pop(request.request_id, 0)
        srv.decode_tokens[r] -= request.max_tokens
        tpot_slos = srv.tpot_slos[r]
        had_slo = tpot_slos.pop(request.request_id, None) is not None
        if srv.state == "ready":
            view = self.views[r]
            view.inflight_requests[srv.index] = srv.inflight[r]
            view.inflight_prompt_tokens[srv.index] = srv.inflight_tokens[r]
            view.inflight_prefill_tokens[srv.index] = srv.prefill_tokens[r]
            view.inflight_decode_tokens[srv.index] = srv.decode_tokens[r]
            if had_slo:
                view.running_tpot_slos[srv.index] = tuple(tpot_slos.values())
        elif srv.state == "draining" and not any(srv.inflight):
            srv.state = "removed"
        return r

    def _complete(self, srv: _Server, outcome: Outcome) -> None:
        seen = self.dispatched[outcome.request.request_id]  # every request that completes was dispatched
        first_unseen = outcome.request.request_id in srv.prefilling  # it ended at the instant of its first token
        tpot_learned = outcome.request.request_id in self.tpot_learned
        r = self._forget(srv, outcome.request)
        self.freed = True
        self.outcomes.append(outcome)
        view, stream = self.views[r], outcome.request.stream
        if stream:
            view.lengths.add(outcome.output_tokens)
            if outcome.ttft_ms is not None and first_unseen:
                self._learn_first_token(view, outcome.server_id, outcome.request, seen, outcome.ttft_ms)
        pick = seen.decision if type(seen.decision) is Pick else None
        if pick is not None:
            used_tpot = pick.used_tpot_ms()
            if stream and used_tpot is not None and outcome.tpot_ms is not None:
                view.tpot_ratios.add(seen.pool_key, used_tpot, outcome.tpot_ms)
            versions = pick.model_versions or {}
            for target, predicted, actual in (("tpot", pick.predicted_tpot_ms, None if tpot_learned else outcome.tpot_ms),
                                              ("e2e", pick.predicted_e2e_ms,
                                               (outcome.completion_s - seen.dispatch_s) * 1000.0)):
                version = versions.get(target)
                if trains(target, stream) and predicted is not None and actual is not None and version is not None:
                    view.corrections.observe(outcome.server_id, seen.pool_key, target, predicted, actual,
                                             version, self.now)
        if self.telemetry:
            self.seen.append(seen)
        if self.on_record is not None:
            self.on_record(telemetry_record(outcome, seen, self.epoch))

    def _scrape(self) -> None:
        now, view = self.now, self.view
        for srv in self.servers.values():
            if srv.state == "removed":
                continue
            snap = srv.engine.snapshot(now)
            if srv.state != "ready":
                snap = snap._replace(ready=False)
            srv.snapshot = snap
            self.metrics.append(snap)
            if srv.state == "ready":
                view.snapshots[srv.index] = snap

    def _offer_held(self) -> None:
        """Ask again about each router's held requests, oldest first, until one is held again."""
        self.freed = False
        for r, queue in enumerate(self.held):
            while queue and self._dispatch(queue.popleft(), r):
                pass

    def _dispatch(self, request: SimRequest, r: int | None = None) -> bool:
        """Route an arriving request (``r``: a held one, which router holds it); False if it is held (again)."""
        held = r is not None
        if r is None:
            r = self.router_rng.randrange(self.routers) if self.routers > 1 else 0
        view = self.views[r]
        if not view.snapshots:
            self.dropped.append(Dropped(request, "", self.now, "no routable server"))
            return True
        self._relay_early_tpots()
        view._start(request, self.now)
        decision = self.picks[r](request, view)
        if isinstance(decision, Hold):
            if held:
                self.held[r].appendleft(request)
            else:
                self.held[r].append(request)
            return False
        if isinstance(decision, Shed):
            self.dropped.append(Dropped(request, "", self.now, decision.reason))
            return True
        server_id = decision if isinstance(decision, str) else decision.server_id
        srv = self.servers.get(server_id)
        if srv is None or srv.state != "ready":
            raise SimulationError(f"pick chose {server_id!r}, which is not a routable server")
        i = srv.index
        self.dispatched[request.request_id] = Dispatched(view.server_state(i), view.snapshots[i].pool_key,
                                                         self.now, decision)
        self.router_of[request.request_id] = r
        srv.inflight[r] += 1
        srv.inflight_tokens[r] += request.prompt_tokens
        srv.decode_tokens[r] += request.max_tokens
        if request.stream:  # the router sees a streaming request's first token, a non-streaming one's never
            srv.prefill_tokens[r] += request.prompt_tokens
            srv.prefilling[request.request_id] = request.prompt_tokens
            if type(decision) is Pick and decision.predicted_ttft_ms is not None:
                view.watch.dispatched(server_id, request.request_id, self.now, decision.predicted_ttft_ms)
            slo = decision.tpot_slo_ms if type(decision) is Pick and decision.tpot_slo_ms else request.slo_tpot_ms
            if slo is not None:
                tpot_slos = srv.tpot_slos[r]
                tpot_slos[request.request_id] = slo
                view.running_tpot_slos[i] = tuple(tpot_slos.values())
        if self.own_prefixes:
            srv.known[r].update(request.prefix_hashes)
        view.inflight_requests[i] = srv.inflight[r]
        view.inflight_prompt_tokens[i] = srv.inflight_tokens[r]
        view.inflight_prefill_tokens[i] = srv.prefill_tokens[r]
        view.inflight_decode_tokens[i] = srv.decode_tokens[r]
        srv.engine.submit(request, self.now)
        self.schedule(srv)
        return True

    def loop(self) -> RunResult:
        started = time.perf_counter()
        requests, heap, inf = self.requests, self.heap, float("inf")
        n, i = len(requests), 0
        next_scrape = 0.0
        next_control = self.control_interval if self.controller else inf
        while True:
            t_arrival = requests[i].arrival_s if i < n else inf
            t_event = heap[0][0] if heap else inf
            if t_arrival == inf and (t_event == inf or heap[0][2] == _ACTION and not self._busy()):
                if not any(self.held):
                    break
                if self.now - min(q[0].arrival_s for q in self.held if q) > _LONGEST_HOLD_S:
                    raise SimulationError(f"the pick held requests for over {_LONGEST_HOLD_S:g} s with nothing "
                                          "else to happen")
            t = min(t_arrival, t_event)
            if next_scrape <= t or next_control <= t:
                if next_scrape <= next_control:
                    self.now = next_scrape
                    self._scrape()
                    next_scrape += self.scrape_interval
                    if any(self.held):
                        self._offer_held()
                else:
                    self.now = next_control
                    if self.controller is not None:  # else next_control stays infinite
                        self.controller(self.control)
                    next_control += self.control_interval
                continue
            self.now = t
            if t_event <= t_arrival:
                _, _, kind, payload, version = heappop(heap)
                if kind == _WAKE:
                    if version == payload.version:
                        payload.wake = None
                        payload.engine.advance_to(t)
                        self.schedule(payload)
                elif kind == _DONE:
                    self._complete(*payload)
                elif kind == _FIRST:
                    self._first_token(*payload)
                elif kind == _EARLY:
                    self._early_tpot(*payload)
                elif kind == _READY:
                    if payload.state == "loading":
                        payload.state = "ready"
                        payload.engine.advance_to(t)
                        payload.snapshot = payload.engine.snapshot(t)
                        self._reindex()
                else:
                    payload(self.control)
            else:
                i += 1
                self._dispatch(requests[i - 1])
            if self.freed and any(self.held):
                self._offer_held()
        return RunResult(self.outcomes, self.dropped, self.metrics, self.now, time.perf_counter() - started,
                         {sid: s.state for sid, s in self.servers.items()}, self.seen, self.epoch)

    def _busy(self) -> bool:
        return any(s.engine.busy for s in self.servers.values())
