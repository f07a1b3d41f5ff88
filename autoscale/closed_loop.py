"""Closed loop: the HPA simulator drives the pool simulator's replica count while a trace plays.

Every ``tick_s`` of virtual time the loop (a ``sim.pool`` controller):

1. scrapes the servers' signals into the metric pipeline when a scrape is due (``scrape_interval_s``;
   values reach the HPA ``adapter_lag_s`` later);
2. runs one HPA sync every ``sync_period`` (15 s) with the pods as Kubernetes would list them — a
   server still loading the model is a Running, not-Ready pod with no metrics (a *missing* pod), a
   draining server is a terminating pod (ignored);
3. applies the decision: new servers start loading (serving after the profile's load delay); on a
   scale-down, loading servers go first, then the newest ready ones (the ReplicaSet's order);
4. books cost: replica-seconds of every server that is loading, serving or draining.

Each HPA metric reads the signal its name binds to in any pipeline's naming
(:func:`autoscale.pipelines.binding`): ``Pods`` metrics per server; ``External`` and ``Object`` metrics
one value over the ready servers, aggregated as their query says (``sum`` unless a KEDA trigger or an
adapter rule says ``avg``, ``max`` or ``min``; a bare series with several servers is the error KEDA
gives). ``Resource`` ``memory`` reads the servers' accelerator memory; the simulator has no CPU. The
pool exports only what its model server does (:mod:`autoscale.servers`): an HPA naming anything else is
refused, as a cluster would leave it without a metric. headroom's predicted-TTFT signal comes from a
model learned on the pool's own telemetry (:mod:`autoscale.learned`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import xgboost as xgb

from headroom.autoscale.controller import ControllerSettings, HpaController, ScaleTarget, SyncResult
from headroom.autoscale.documents import Autoscaler, bindings
from headroom.autoscale.errors import SpecError
from headroom.autoscale.learned import LearnedTtft, TrainingPlan, learn_ttft_model
from headroom.autoscale.metrics_source import ScrapedMetrics, StaticMetrics
from headroom.autoscale.pipelines import Binding
from headroom.autoscale.pods import Pod, PodPhase, PodSample
from headroom.autoscale.servers import ModelServer
from headroom.autoscale.spec import HpaSpec, SourceType
from headroom.contract.prompt import BLOCK_TOKENS
from headroom.contract.scaling_signals import ReportedMetrics, Signal, SignalContext, pool_signals_by_server
from headroom.sim.policies import policy
from headroom.sim.pool import PoolControl, SimServerSpec, run
from headroom.sim.profile import KV_BYTES_PER_TOKEN, ServerProfile, profile
from headroom.sim.request import SimRequest
from headroom.sim.results import quantile
from headroom.sim.view import PoolView

AGGREGATE: dict[str, Callable[[list[int]], float]] = {"sum": sum, "max": max, "min": min, "avg": lambda values: sum(values) / len(values)}


@dataclass(frozen=True)
class LoopSettings:
    """How the closed loop is wired: model server, server type, pipeline delays, loop resolution,
    routing, seed, starting size, the router's TTFT SLO and how its TTFT model is learned."""

    model_server: ModelServer = ModelServer()
    server_type: str = "h100"
    load_delay_s: float | None = None
    scrape_interval_s: float = 15.0
    adapter_lag_s: float = 0.0
    tick_s: float = 5.0
    router_scrape_s: float = 0.05
    pick: str = "least-queue"
    seed: int = 0
    initial_replicas: int | None = None
    ttft_slo_ms: float | None = None
    learning: TrainingPlan = TrainingPlan()
    memory_capacity_bytes: int = 80 * 2**30
    controller: ControllerSettings = ControllerSettings()

    @property
    def profile(self) -> ServerProfile:
        prof = profile(self.server_type)
        return prof if self.load_delay_s is None else prof.with_(load_delay_s=self.load_delay_s)


@dataclass(frozen=True)
class TimelinePoint:
    """The pool at one tick: desired count, servers by state, and the HPA metrics' pool means."""

    t: float
    spec_replicas: int
    ready: int
    loading: int
    draining: int
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class LoopResult:
    timeline: tuple[TimelinePoint, ...]
    syncs: tuple[SyncResult, ...]
    arrival_s: tuple[float, ...]  # per completed request, parallel to ttft_ms
    ttft_ms: tuple[float, ...]
    tpot_ms: tuple[float, ...]
    dropped: int
    replica_seconds: float
    end_s: float

    @property
    def requests(self) -> int:
        return len(self.ttft_ms) + self.dropped

    @property
    def replica_hours(self) -> float:
        return self.replica_seconds / 3600

    def ttft_quantile(self, q: float) -> float:
        return quantile(self.ttft_ms, q)

    def tpot_quantile(self, q: float) -> float:
        return quantile(self.tpot_ms, q)

    def ttft_attainment(self, slo_ms: float) -> float:
        """Share of requests whose TTFT met ``slo_ms`` (dropped requests miss)."""
        if not self.requests:
            return 1.0
        return sum(1 for v in self.ttft_ms if v <= slo_ms) / self.requests

    @property
    def rescales(self) -> int:
        return sum(1 for s in self.syncs if s.rescaled)

    @property
    def peak_replicas(self) -> int:
        return max((p.spec_replicas for p in self.timeline), default=0)


def pool_bindings(autoscaler: Autoscaler, settings: LoopSettings) -> dict[str, Binding]:
    """Each metric's binding; SpecError for a metric the simulated pool cannot serve."""
    for metric in autoscaler.spec.metrics:
        if metric.source in (SourceType.RESOURCE, SourceType.CONTAINER_RESOURCE) and metric.name != "memory":
            raise SpecError(f"metric {metric.label}: the simulated pool reports no {metric.name}; use the "
                            f"model server's metrics or memory")
    found = bindings(autoscaler)
    server = settings.model_server
    for label, bound in found.items():
        if not server.serves(bound.signal):
            exported = ", ".join(s.value for s in server.exported)
            raise SpecError(f"metric {label}: a {server.label} pool does not export {bound.signal.value}, so the "
                            f"HPA would find no metric and never scale (it exports {exported})")
        if bound.signal in (Signal.TTFT_SLO_RATIO, Signal.TTFT_HEADROOM_MS) and settings.ttft_slo_ms is None:
            raise SpecError(f"metric {label}: the predicted-TTFT signal needs the router's TTFT SLO")
    return found


def needs_ttft_model(bound: Mapping[str, Binding]) -> bool:
    return any(b.signal in (Signal.TTFT_SLO_RATIO, Signal.TTFT_HEADROOM_MS) for b in bound.values())


class _Loop:
    """The sim.pool controller that plays the cluster: metric pipeline, HPA, Deployment, cost."""

    def __init__(self, spec: HpaSpec, bound: Mapping[str, Binding], settings: LoopSettings,
                 initial: Sequence[str], ttft_model: xgb.Booster | None, end_s: float,
                 progress: Callable[[float, float], None] | None) -> None:
        self.spec, self.bound, self.settings = spec, bound, settings
        self.hpa = HpaController(spec, settings.controller)
        self.pipeline = ScrapedMetrics(settings.scrape_interval_s, settings.adapter_lag_s)
        self.profile = settings.profile
        self.created = {sid: 0.0 for sid in initial}
        self.spec_replicas = len(initial)
        self.next_sync = settings.controller.sync_period
        self.syncs: list[SyncResult] = []
        self.timeline: list[TimelinePoint] = []
        self.replica_seconds = 0.0
        self.serial = len(initial)
        self.end_s, self.progress = end_s, progress
        self.control: PoolControl | None = None
        hbm = settings.model_server.kind == "jetstream"  # its accelerator memory grows with the KV cache in use
        self.context = SignalContext(
            memory_capacity_bytes=settings.memory_capacity_bytes, ttft_slo_ms=settings.ttft_slo_ms,
            predictor=None if ttft_model is None else LearnedTtft(ttft_model, self._router_view,
                                                                  settings.learning.reference_prompt_tokens),
            weights_bytes=self.profile.weights_bytes if hbm else None,
            kv_capacity_bytes=self.profile.kv_blocks * BLOCK_TOKENS * KV_BYTES_PER_TOKEN if hbm else None)

    def __call__(self, control: PoolControl) -> None:
        self.control = control
        now = control.now
        states = control.servers()
        by_server = pool_signals_by_server(control.snapshots(), self.context)
        if self.pipeline.scrape_due(now):
            self.pipeline.record(now, self._metrics(control.snapshots(), by_server, now))
        if now + 1e-9 >= self.next_sync:
            self.next_sync += self.settings.controller.sync_period
            result = self.hpa.sync(now, ScaleTarget(self.spec_replicas, self._pods(states), self._live(states)),
                                   self.pipeline.at(now))
            self.syncs.append(result)
            if result.desired != self.spec_replicas:
                self._scale(control, states, result.desired)
                states = control.servers()
        alive = [s for s in states.values() if s != "removed"]
        self.replica_seconds += self.settings.tick_s * len(alive)
        self.timeline.append(TimelinePoint(
            now, self.spec_replicas, alive.count("ready"), alive.count("loading"), alive.count("draining"),
            self._means(by_server)))
        if self.progress is not None:
            self.progress(now, self.end_s)

    def _live(self, states: dict[str, str]) -> int:
        return sum(1 for s in states.values() if s in ("loading", "ready"))

    def _pods(self, states: dict[str, str]) -> tuple[Pod, ...]:
        pods = []
        memory_request = self.settings.memory_capacity_bytes * 1000
        for sid, state in states.items():
            if state == "removed":
                continue
            started = self.created.get(sid, 0.0)
            pods.append(Pod(sid, PodPhase.RUNNING, ready=state == "ready", deleting=state == "draining",
                            started_at=started, ready_changed_at=started + self.profile.load_delay_s,
                            requests={"memory": memory_request}))
        return tuple(pods)

    def _router_view(self) -> PoolView:
        """What the learned TTFT predictor sees of the running pool."""
        if self.control is None:
            raise RuntimeError("the pool is not running yet")
        return self.control.router_view()

    def _metrics(self, snapshots: Sequence[ReportedMetrics], by_server: Mapping[str, Mapping[Signal, float]],
                 now: float) -> StaticMetrics:
        pods, objects, external = {}, {}, {}
        for metric in self.spec.metrics:
            if metric.source in (SourceType.RESOURCE, SourceType.CONTAINER_RESOURCE):
                values = {s.server_id: s.metrics.memory_used_bytes * 1000 for s in snapshots
                          if s.ready and s.metrics.memory_used_bytes is not None}
            else:
                bound = self.bound[metric.label]
                values = {sid: int(v[bound.signal] * 1000) for sid, v in by_server.items() if bound.signal in v}
            if metric.source not in (SourceType.OBJECT, SourceType.EXTERNAL):
                if values:
                    pods[metric.label] = {sid: PodSample(v, timestamp=now) for sid, v in values.items()}
                continue
            one = _aggregate(self.bound[metric.label].aggregation, list(values.values()))
            if one is None:
                continue
            if metric.source is SourceType.OBJECT:
                objects[metric.label] = one
            else:
                external[metric.label] = [one]
        return StaticMetrics(pods=pods, objects=objects, external=external)

    def _means(self, by_server: Mapping[str, Mapping[Signal, float]]) -> dict[str, float]:
        means = {}
        for bound in self.bound.values():
            values = [v[bound.signal] for v in by_server.values() if bound.signal in v]
            if values:
                means[bound.signal.value] = sum(values) / len(values)
        return means

    def _scale(self, control: PoolControl, states: dict[str, str], desired: int) -> None:
        live = [sid for sid, s in states.items() if s in ("loading", "ready")]
        if desired > len(live):
            for _ in range(desired - len(live)):
                sid = f"server-{self.serial}"
                self.serial += 1
                control.add_server(self.profile, sid)
                self.created[sid] = control.now
        else:
            order = sorted(live, key=lambda sid: (states[sid] != "loading", -self.created.get(sid, 0.0), sid))
            for sid in order[:len(live) - desired]:
                control.remove_server(sid)
        self.spec_replicas = desired


def _aggregate(aggregation: str | None, values: list[int]) -> int | None:
    """One value of a query over the ready servers; None when the query gives none (KEDA's error for a
    bare series over several servers, or no server reporting)."""
    if not values or (aggregation is None and len(values) > 1):
        return None
    return int(AGGREGATE[aggregation or "sum"](values))


def run_closed_loop(autoscaler: Autoscaler | HpaSpec, requests: Sequence[SimRequest],
                    settings: LoopSettings = LoopSettings(), *, ttft_model: xgb.Booster | None = None,
                    progress: Callable[[float, float], None] | None = None) -> LoopResult:
    """Play ``requests`` on a pool scaled by ``autoscaler``; the same inputs and seed give the same result.

    ``ttft_model`` is the learned TTFT model when the caller has one for these requests and settings
    (else it is learned here, if a metric needs it); ``progress(now, end)`` is called every tick.
    """
    if isinstance(autoscaler, HpaSpec):
        autoscaler = Autoscaler(autoscaler)
    bound = pool_bindings(autoscaler, settings)
    if needs_ttft_model(bound) and ttft_model is None:
        ttft_model = learn_ttft_model(requests, settings.profile, settings.seed, settings.learning)
    spec = autoscaler.spec
    initial_count = starting_replicas(spec, settings)
    initial = [f"server-{i}" for i in range(initial_count)]
    end_s = requests[-1].arrival_s if requests else 0.0
    loop = _Loop(spec, bound, settings, initial, ttft_model if needs_ttft_model(bound) else None, end_s, progress)
    pool = [SimServerSpec(sid, loop.profile) for sid in initial]
    result = run(requests, pool, policy(settings.pick, settings.seed), scrape_interval_s=settings.router_scrape_s,
                 seed=settings.seed, controller=loop, control_interval_s=settings.tick_s, telemetry=False)
    outcomes = sorted(result.outcomes, key=lambda o: o.request.arrival_s)
    arrivals = tuple(o.request.arrival_s for o in outcomes)
    ttft = tuple(o.ttft_ms for o in outcomes)
    tpot = tuple(v for v in (o.tpot_ms for o in outcomes) if v is not None)
    return LoopResult(tuple(loop.timeline), tuple(loop.syncs), arrivals, ttft, tpot, len(result.dropped),
                      loop.replica_seconds, result.end_s)


def starting_replicas(spec: HpaSpec, settings: LoopSettings) -> int:
    """Servers in service when the trace starts: the settings', else the autoscaler's annotation, else its
    minReplicas."""
    return settings.initial_replicas or spec.initial_replicas or spec.min_replicas
