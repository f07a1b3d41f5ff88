"""The ``autoscaling/v2`` HorizontalPodAutoscaler spec as frozen domain values, with Kubernetes' defaults.

Targets are held in integer milli-units, as the controller reads them (``Quantity.MilliValue()``).
Validation mirrors the API server's, so a spec built here is one a cluster would accept:
min ≥ 1, max ≥ min, stabilization windows in [0, 3600] s, policy periods in (0, 1800] s, policy values
> 0, tolerances ≥ 0, and the target type each metric source allows.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from headroom.autoscale.errors import SpecError

MAX_STABILIZATION_WINDOW_SECONDS = 3600
MAX_POLICY_PERIOD_SECONDS = 1800


class SourceType(enum.Enum):
    """Where a metric comes from (``spec.metrics[].type``)."""

    RESOURCE = "Resource"
    CONTAINER_RESOURCE = "ContainerResource"
    PODS = "Pods"
    OBJECT = "Object"
    EXTERNAL = "External"


class TargetType(enum.Enum):
    """How a metric's target is expressed (``target.type``)."""

    UTILIZATION = "Utilization"
    VALUE = "Value"
    AVERAGE_VALUE = "AverageValue"


class PolicyType(enum.Enum):
    PODS = "Pods"
    PERCENT = "Percent"


class SelectPolicy(enum.Enum):
    MAX = "Max"
    MIN = "Min"
    DISABLED = "Disabled"


_ALLOWED_TARGETS = {
    SourceType.RESOURCE: {TargetType.UTILIZATION, TargetType.AVERAGE_VALUE},
    SourceType.CONTAINER_RESOURCE: {TargetType.UTILIZATION, TargetType.AVERAGE_VALUE},
    SourceType.PODS: {TargetType.AVERAGE_VALUE},
    SourceType.OBJECT: {TargetType.VALUE, TargetType.AVERAGE_VALUE},
    SourceType.EXTERNAL: {TargetType.VALUE, TargetType.AVERAGE_VALUE},
}


@dataclass(frozen=True)
class MetricTarget:
    """A target: ``Utilization`` in percent of requests, or ``Value`` / ``AverageValue`` in milli-units."""

    type: TargetType
    amount: int

    def __post_init__(self) -> None:
        if self.amount <= 0:
            raise SpecError(f"target {self.type.value} must be > 0, got {self.amount}")


@dataclass(frozen=True)
class ObjectReference:
    """The object an ``Object`` metric describes (``describedObject``)."""

    kind: str
    name: str
    api_version: str = ""


@dataclass(frozen=True)
class MetricSpec:
    """One entry of ``spec.metrics``. ``name`` is the resource name for Resource sources."""

    source: SourceType
    name: str
    target: MetricTarget
    selector: Mapping[str, str] | None = None
    container: str | None = None
    described_object: ObjectReference | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise SpecError(f"{self.source.value} metric needs a name")
        if self.target.type not in _ALLOWED_TARGETS[self.source]:
            allowed = sorted(t.value for t in _ALLOWED_TARGETS[self.source])
            raise SpecError(f"{self.source.value} metric {self.name!r} cannot have a {self.target.type.value} "
                            f"target (allowed: {', '.join(allowed)})")
        if (self.source is SourceType.CONTAINER_RESOURCE) != bool(self.container):
            raise SpecError(f"metric {self.name!r}: a container name goes with ContainerResource metrics only")
        if (self.source is SourceType.OBJECT) != (self.described_object is not None):
            raise SpecError(f"metric {self.name!r}: describedObject goes with Object metrics only")

    @property
    def label(self) -> str:
        """A short human name, e.g. ``pods/vllm:num_requests_waiting``."""
        return f"{self.source.value.lower()}/{self.name}"


@dataclass(frozen=True)
class ScalingPolicy:
    """At most ``value`` pods (or percent) of change per ``period_seconds``."""

    type: PolicyType
    value: int
    period_seconds: int

    def __post_init__(self) -> None:
        if self.value <= 0:
            raise SpecError(f"{self.type.value} policy value must be > 0, got {self.value}")
        if not 0 < self.period_seconds <= MAX_POLICY_PERIOD_SECONDS:
            raise SpecError(f"policy periodSeconds must be in (0, {MAX_POLICY_PERIOD_SECONDS}], "
                            f"got {self.period_seconds}")


@dataclass(frozen=True)
class ScalingRules:
    """One direction of ``spec.behavior``.

    ``stabilization_window_seconds`` and ``tolerance`` may be ``None``: the controller then uses its own
    defaults (scale-down window 300 s; tolerance 0.1).
    """

    policies: tuple[ScalingPolicy, ...]
    select_policy: SelectPolicy = SelectPolicy.MAX
    stabilization_window_seconds: int | None = None
    tolerance: float | None = None

    def __post_init__(self) -> None:
        if not self.policies:
            raise SpecError("scaling rules must have at least one policy")
        window = self.stabilization_window_seconds
        if window is not None and not 0 <= window <= MAX_STABILIZATION_WINDOW_SECONDS:
            raise SpecError(f"stabilizationWindowSeconds must be in [0, {MAX_STABILIZATION_WINDOW_SECONDS}], "
                            f"got {window}")
        if self.tolerance is not None and self.tolerance < 0:
            raise SpecError(f"tolerance must be >= 0, got {self.tolerance}")

    @property
    def longest_period_seconds(self) -> int:
        return max(p.period_seconds for p in self.policies)


DEFAULT_SCALE_UP = ScalingRules(
    policies=(ScalingPolicy(PolicyType.PODS, 4, 15), ScalingPolicy(PolicyType.PERCENT, 100, 15)),
    select_policy=SelectPolicy.MAX, stabilization_window_seconds=0)
DEFAULT_SCALE_DOWN = ScalingRules(
    policies=(ScalingPolicy(PolicyType.PERCENT, 100, 15),),
    select_policy=SelectPolicy.MAX, stabilization_window_seconds=None)


@dataclass(frozen=True)
class Behavior:
    """``spec.behavior``, both directions filled with Kubernetes' defaults."""

    scale_up: ScalingRules = DEFAULT_SCALE_UP
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN


@dataclass(frozen=True)
class ScaleTargetRef:
    kind: str = "Deployment"
    name: str = "model-server"
    api_version: str = "apps/v1"


def default_metrics() -> tuple[MetricSpec, ...]:
    """What Kubernetes fills in when ``spec.metrics`` is empty: CPU at 80 % utilization."""
    return (MetricSpec(SourceType.RESOURCE, "cpu", MetricTarget(TargetType.UTILIZATION, 80)),)


@dataclass(frozen=True)
class HpaSpec:
    """A whole HorizontalPodAutoscaler: ``behavior=None`` takes the controller's legacy path."""

    max_replicas: int
    metrics: tuple[MetricSpec, ...] = field(default_factory=default_metrics)
    min_replicas: int = 1
    behavior: Behavior | None = None
    name: str = "model-server"
    namespace: str = "default"
    target_ref: ScaleTargetRef = ScaleTargetRef()
    initial_replicas: int | None = None  # serving when it takes over, if its figures assume so (an annotation)

    def __post_init__(self) -> None:
        if self.min_replicas < 1:
            raise SpecError(f"minReplicas must be >= 1, got {self.min_replicas}")
        if self.initial_replicas is not None and not self.min_replicas <= self.initial_replicas <= self.max_replicas:
            raise SpecError(f"the initial replicas ({self.initial_replicas}) must be within minReplicas and "
                            f"maxReplicas ({self.min_replicas}..{self.max_replicas})")
        if self.max_replicas < self.min_replicas:
            raise SpecError(f"maxReplicas ({self.max_replicas}) must be >= minReplicas ({self.min_replicas})")
        if not self.metrics:
            raise SpecError("an HPA needs at least one metric")
