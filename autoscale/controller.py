"""The HPA controller's reconcile loop for one HorizontalPodAutoscaler, on an injected clock.

Each :meth:`HpaController.sync` is one reconcile (Kubernetes runs them every 15 s):

1. the first sync seeds the recommendation history with the current count;
2. current 0 with min ≠ 0 → scaling disabled; current > max → max; current < min → min;
3. otherwise every metric proposes a count; the max of valid proposals wins. If every metric is
   invalid, or some are and the max is below the current count, nothing happens this sync;
4. the desired count is normalized (legacy path without ``behavior``, policy path with it, see
   :mod:`autoscale.normalize`), and scale events are recorded for the policies' periods.

The controller holds only the in-memory history Kubernetes holds (recommendations, scale events).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from headroom.autoscale import normalize, replica_calc
from headroom.autoscale.errors import MetricUnavailable
from headroom.autoscale.metrics_source import MetricsSource
from headroom.autoscale.pods import Pod, ReadinessTiming
from headroom.autoscale.replica_calc import Proposal, Tolerances
from headroom.autoscale.spec import HpaSpec, MetricSpec, SourceType, TargetType
from headroom.contract.settings import setting


@dataclass(frozen=True)
class ControllerSettings:
    """The kube-controller-manager flags that shape HPA decisions."""

    sync_period: float = setting(15.0, "HEADROOM_HPA_SYNC_PERIOD_S",
                                 "Seconds between two reconciles of an HPA.")
    tolerance: float = setting(0.1, "HEADROOM_HPA_TOLERANCE",
                               "Cluster-wide tolerance, used where the HPA sets none.")
    downscale_stabilization: float = setting(300.0, "HEADROOM_HPA_DOWNSCALE_STABILIZATION_S",
                                             "Scale-down stabilization window where the HPA sets none.")
    cpu_initialization_period: float = setting(300.0, "HEADROOM_HPA_CPU_INIT_PERIOD_S",
                                               "Seconds after start during which CPU samples need readiness.")
    initial_readiness_delay: float = setting(30.0, "HEADROOM_HPA_INITIAL_READINESS_DELAY_S",
                                             "Seconds after start during which a readiness flip is initial.")
    legacy_scale_up_factor: float = setting(2.0, "HEADROOM_HPA_LEGACY_SCALE_UP_FACTOR",
                                            "Without behavior, one sync grows at most to max(factor·current, 4).")

    @property
    def readiness(self) -> ReadinessTiming:
        return ReadinessTiming(self.cpu_initialization_period, self.initial_readiness_delay)


@dataclass(frozen=True)
class ScaleTarget:
    """The scale subresource and the pods its selector matches, as read at the start of a sync."""

    spec_replicas: int
    pods: tuple[Pod, ...] = ()
    status_replicas: int | None = None

    @property
    def observed_replicas(self) -> int:
        return self.spec_replicas if self.status_replicas is None else self.status_replicas


@dataclass(frozen=True)
class MetricOutcome:
    """One metric's result in a sync: a proposal, or why it had none."""

    metric: MetricSpec
    proposal: Proposal | None = None
    error: str | None = None


@dataclass(frozen=True)
class SyncResult:
    """What one reconcile saw and decided. ``desired == current`` means no rescale."""

    at: float
    current: int
    desired: int
    reason: str
    outcomes: tuple[MetricOutcome, ...] = ()
    metric_desired: int | None = None

    @property
    def rescaled(self) -> bool:
        return self.desired != self.current


@dataclass
class _History:
    recommendations: tuple[normalize.Recommendation, ...] = ()
    seeded: bool = False
    up_events: tuple[normalize.ScaleEvent, ...] = ()
    down_events: tuple[normalize.ScaleEvent, ...] = ()


class HpaController:
    """Reconciles one HPA; call :meth:`sync` once per sync period with the clock's ``now``."""

    def __init__(self, spec: HpaSpec, settings: ControllerSettings = ControllerSettings()) -> None:
        self.spec = spec
        self.settings = settings
        self._history = _History()

    @property
    def recommendations(self) -> tuple[normalize.Recommendation, ...]:
        return self._history.recommendations

    @property
    def tolerances(self) -> Tolerances:
        default = self.settings.tolerance
        behavior = self.spec.behavior
        if behavior is None:
            return Tolerances(default, default)
        down, up = behavior.scale_down.tolerance, behavior.scale_up.tolerance
        return Tolerances(default if down is None else down, default if up is None else up)

    def sync(self, now: float, target: ScaleTarget, metrics: MetricsSource) -> SyncResult:
        spec = self.spec
        current = target.spec_replicas
        if not self._history.seeded:
            self._history.recommendations = (normalize.Recommendation(current, now),)
            self._history.seeded = True

        if current == 0 and spec.min_replicas != 0:
            return SyncResult(now, current, current, "scaling is disabled since the replica count is zero")
        if current > spec.max_replicas:
            return self._rescale(SyncResult(now, current, spec.max_replicas, "current above maxReplicas"))
        if current < spec.min_replicas:
            return self._rescale(SyncResult(now, current, spec.min_replicas, "current below minReplicas"))

        metric_desired, outcomes = self.propose(now, target, metrics)
        if metric_desired < 0:
            return SyncResult(now, current, current, "invalid metrics: no scaling", outcomes)
        proposed = max(0, metric_desired)
        if spec.behavior is None:
            stabilized, desired = self._normalize_legacy(now, current, proposed)
        else:
            stabilized, desired = self._normalize_with_behavior(now, current, proposed)
        reason = _reason(current, proposed, stabilized, desired, spec)
        return self._rescale(SyncResult(now, current, desired, reason, outcomes, metric_desired))

    def propose(self, now: float, target: ScaleTarget,
                metrics: MetricsSource) -> tuple[int, tuple[MetricOutcome, ...]]:
        """Max over the metrics' proposals, or −1 when the broken-metric rule forbids acting."""
        outcomes = []
        replicas = 0
        invalid = 0
        for metric in self.spec.metrics:
            try:
                proposal = self._propose_one(metric, now, target, metrics)
            except MetricUnavailable as err:
                invalid += 1
                outcomes.append(MetricOutcome(metric, error=str(err)))
                continue
            outcomes.append(MetricOutcome(metric, proposal))
            if replicas == 0 or proposal.replicas > replicas:
                replicas = proposal.replicas
        if invalid >= len(self.spec.metrics) or (invalid > 0 and replicas < target.spec_replicas):
            return -1, tuple(outcomes)
        return replicas, tuple(outcomes)

    def _propose_one(self, metric: MetricSpec, now: float, target: ScaleTarget,
                     metrics: MetricsSource) -> Proposal:
        tolerances = self.tolerances
        spec_replicas, pods = target.spec_replicas, target.pods
        kind, amount = metric.target.type, metric.target.amount
        if metric.source in (SourceType.RESOURCE, SourceType.CONTAINER_RESOURCE):
            samples = metrics.pod_samples(metric, now)
            if kind is TargetType.UTILIZATION:
                return replica_calc.resource_utilization_replicas(
                    spec_replicas, amount, metric.name, tolerances, pods, samples, now, self.settings.readiness)
            return replica_calc.pods_average_replicas(spec_replicas, amount, tolerances, pods, samples, now,
                                                      metric.name, self.settings.readiness)
        if metric.source is SourceType.PODS:
            samples = metrics.pod_samples(metric, now)
            return replica_calc.pods_average_replicas(spec_replicas, amount, tolerances, pods, samples, now,
                                                      None, self.settings.readiness)
        if metric.source is SourceType.OBJECT:
            usage = metrics.object_value(metric, now)
            if kind is TargetType.VALUE:
                return replica_calc.object_value_replicas(spec_replicas, usage, amount, tolerances, pods)
            return replica_calc.object_average_value_replicas(target.observed_replicas, usage, amount, tolerances)
        values = metrics.external_values(metric, now)
        if kind is TargetType.VALUE:
            return replica_calc.external_value_replicas(spec_replicas, values, amount, tolerances, pods)
        return replica_calc.external_average_value_replicas(target.observed_replicas, values, amount, tolerances)

    def _normalize_legacy(self, now: float, current: int, desired: int) -> tuple[int, int]:
        """The stabilized recommendation and the count after the limits."""
        stabilized, self._history.recommendations = normalize.stabilize_legacy(
            self._history.recommendations, desired, now, self.settings.downscale_stabilization)
        return stabilized, normalize.legacy_limits(current, stabilized, self.spec.min_replicas,
                                                   self.spec.max_replicas, self.settings.legacy_scale_up_factor)

    def _normalize_with_behavior(self, now: float, current: int, desired: int) -> tuple[int, int]:
        """The stabilized recommendation and the count after the policies' rate limits and the bounds."""
        behavior = self.spec.behavior
        assert behavior is not None
        up_window = behavior.scale_up.stabilization_window_seconds or 0
        configured = behavior.scale_down.stabilization_window_seconds
        down_window = self.settings.downscale_stabilization if configured is None else configured
        stabilized, self._history.recommendations = normalize.stabilize_with_behavior(
            self._history.recommendations, desired, current, now, up_window, down_window)
        return stabilized, normalize.behavior_limits(current, stabilized, self.spec.min_replicas,
                                                     self.spec.max_replicas, self._history.up_events,
                                                     self._history.down_events, behavior.scale_up,
                                                     behavior.scale_down, now)

    def _rescale(self, result: SyncResult) -> SyncResult:
        behavior = self.spec.behavior
        if result.rescaled and behavior is not None:
            if result.desired > result.current:
                self._history.up_events = normalize.record_scale_event(
                    self._history.up_events, result.desired - result.current,
                    behavior.scale_up.longest_period_seconds, result.at)
            else:
                self._history.down_events = normalize.record_scale_event(
                    self._history.down_events, result.current - result.desired,
                    behavior.scale_down.longest_period_seconds, result.at)
        return result


def _reason(current: int, proposed: int, stabilized: int, desired: int, spec: HpaSpec) -> str:
    """Why a sync ends at ``desired``: the metrics' proposal, then what stabilization and limits made of it."""
    if proposed == current:
        return "the metrics propose the current count (within tolerance)"
    direction = "up" if proposed > current else "down"
    if stabilized != proposed:
        held = "held at" if stabilized == current else "stabilized to"
        window = "scale-up" if direction == "up" else "scale-down"
        said = f"metrics propose {proposed}; {held} {stabilized} by the {window} stabilization window"
    else:
        said = f"metrics propose {proposed}"
    if desired == stabilized:
        return said
    if stabilized > spec.max_replicas and desired == spec.max_replicas:
        return f"{said}; clamped to maxReplicas {desired}"
    if stabilized < spec.min_replicas and desired == spec.min_replicas:
        return f"{said}; clamped to minReplicas {desired}"
    limit = "behavior's rate limits" if spec.behavior is not None else "max(2×current, 4) scale-up limit"
    return f"{said}; {'held at' if desired == current else 'limited to'} {desired} by the {limit}"


def sync_times(start: float, end: float, period: float) -> Sequence[float]:
    """The reconcile instants in ``[start, end)``: one every ``period`` seconds."""
    count = max(0, int((end - start) // period) + (1 if (end - start) % period else 0))
    return [start + i * period for i in range(count)]
