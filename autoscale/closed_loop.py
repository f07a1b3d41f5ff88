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

HPA metric names map to :class:`~autoscale.signals.Signal` names. ``Pods`` metrics are per-server
values; ``Object`` and ``External`` metrics are the pool total over ready servers (a ``sum()`` query);
``Resource`` ``memory`` reads the servers' accelerator memory. The simulator has no CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from headroom.autoscale.controller import ControllerSettings, HpaController, ScaleTarget, SyncResult
from headroom.autoscale.errors import SpecError
from headroom.autoscale.metrics_source import ScrapedMetrics, StaticMetrics
from headroom.autoscale.pods import Pod, PodPhase, PodSample
from headroom.autoscale.signals import ServerMetrics, Signal, SignalContext, per_pod_milli
from headroom.autoscale.spec import HpaSpec, SourceType
from headroom.sim.policies import policy
from headroom.sim.pool import PoolControl, ServerSpec, run
from headroom.sim.profile import profile
from headroom.sim.request import Request
from headroom.sim.results import quantile

KNOWN_METRICS = tuple(s.value for s in Signal)


@dataclass(frozen=True)
class LoopSettings:
    """How the closed loop is wired: server type, pipeline delays, loop resolution, routing, seed."""

    server_type: str = "h100"
    load_delay_s: float | None = None
    scrape_interval_s: float = 15.0
    adapter_lag_s: float = 0.0
    tick_s: float = 5.0
    router_scrape_s: float = 0.05
    pick: str = "least-queue"
    seed: int = 0
    initial_replicas: int | None = None
    signals: SignalContext = SignalContext()
    controller: ControllerSettings = ControllerSettings()


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


def check_supported(spec: HpaSpec) -> None:
    """Raise SpecError for metrics the simulated pool cannot serve."""
    for metric in spec.metrics:
        if metric.source in (SourceType.RESOURCE, SourceType.CONTAINER_RESOURCE):
            if metric.name != "memory":
                raise SpecError(f"metric {metric.label}: the simulated pool reports no {metric.name}; "
                                f"use Pods metrics ({', '.join(KNOWN_METRICS)}) or memory")
        elif metric.name not in KNOWN_METRICS:
            raise SpecError(f"metric {metric.label}: unknown to the simulated pool; "
                            f"known: {', '.join(KNOWN_METRICS)}")


class _Loop:
    """The sim.pool controller that plays the cluster: metric pipeline, HPA, Deployment, cost."""

    def __init__(self, spec: HpaSpec, settings: LoopSettings, initial: Sequence[str]) -> None:
        self.spec, self.settings = spec, settings
        self.hpa = HpaController(spec, settings.controller)
        self.pipeline = ScrapedMetrics(settings.scrape_interval_s, settings.adapter_lag_s)
        self.profile = profile(settings.server_type)
        if settings.load_delay_s is not None:
            self.profile = self.profile.with_(load_delay_s=settings.load_delay_s)
        self.created = {sid: 0.0 for sid in initial}
        self.spec_replicas = len(initial)
        self.next_sync = settings.controller.sync_period
        self.syncs: list[SyncResult] = []
        self.timeline: list[TimelinePoint] = []
        self.replica_seconds = 0.0
        self.serial = len(initial)

    def __call__(self, control: PoolControl) -> None:
        now = control.now
        states = control.servers()
        snapshots = control.snapshots()
        if self.pipeline.scrape_due(now):
            self.pipeline.record(now, self._metrics(snapshots, now))
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
            self._means(snapshots)))

    def _live(self, states: dict[str, str]) -> int:
        return sum(1 for s in states.values() if s in ("loading", "ready"))

    def _pods(self, states: dict[str, str]) -> tuple[Pod, ...]:
        pods = []
        memory_request = self.settings.signals.memory_capacity_bytes * 1000
        for sid, state in states.items():
            if state == "removed":
                continue
            started = self.created.get(sid, 0.0)
            pods.append(Pod(sid, PodPhase.RUNNING, ready=state == "ready", deleting=state == "draining",
                            started_at=started, ready_changed_at=started + self.profile.load_delay_s,
                            requests={"memory": memory_request}))
        return tuple(pods)

    def _metrics(self, snapshots: Sequence[ServerMetrics], now: float) -> StaticMetrics:
        context = self.settings.signals
        pods, objects, external = {}, {}, {}
        for metric in self.spec.metrics:
            if metric.source in (SourceType.RESOURCE, SourceType.CONTAINER_RESOURCE):
                values = {s.server_id: s.memory_used_bytes * 1000 for s in snapshots if s.ready}
            else:
                values = dict(per_pod_milli(snapshots, Signal(metric.name), context))
            if metric.source is SourceType.OBJECT:
                objects[metric.label] = sum(values.values())
            elif metric.source is SourceType.EXTERNAL:
                external[metric.label] = [sum(values.values())] if values else []
            elif values:
                pods[metric.label] = {sid: PodSample(v, timestamp=now) for sid, v in values.items()}
        return StaticMetrics(pods=pods, objects=objects, external=external)

    def _means(self, snapshots: Sequence[ServerMetrics]) -> dict[str, float]:
        means = {}
        for metric in self.spec.metrics:
            if metric.name in KNOWN_METRICS:
                values = per_pod_milli(snapshots, Signal(metric.name), self.settings.signals)
                if values:
                    means[metric.name] = sum(values.values()) / len(values) / 1000
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


def run_closed_loop(spec: HpaSpec, requests: Sequence[Request], settings: LoopSettings = LoopSettings()) -> LoopResult:
    """Play ``requests`` on a pool scaled by ``spec``; the same inputs and seed give the same result."""
    check_supported(spec)
    initial_count = settings.initial_replicas or spec.min_replicas
    initial = [f"server-{i}" for i in range(initial_count)]
    loop = _Loop(spec, settings, initial)
    pool = [ServerSpec(sid, loop.profile) for sid in initial]
    result = run(requests, pool, policy(settings.pick, settings.seed), scrape_interval_s=settings.router_scrape_s,
                 seed=settings.seed, controller=loop, control_interval_s=settings.tick_s, telemetry=False)
    outcomes = sorted(result.outcomes, key=lambda o: o.request.arrival_s)
    arrivals = tuple(o.request.arrival_s for o in outcomes)
    ttft = tuple(o.ttft_ms for o in outcomes)
    tpot = tuple(v for v in (o.tpot_ms for o in outcomes) if v is not None)
    return LoopResult(tuple(loop.timeline), tuple(loop.syncs), arrivals, ttft, tpot, len(result.dropped),
                      loop.replica_seconds, result.end_s)
