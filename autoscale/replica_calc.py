"""One metric → one replica proposal, exactly as Kubernetes' replica calculator computes it.

Values are integer milli-units; per-pod averages and utilization percentages truncate (Go integer
division); replica counts are ``ceil(ratio · pods)`` in float64 arithmetic. Each function is pure and
raises :class:`~autoscale.errors.MetricUnavailable` where the controller would get an error.

Which pod count multiplies the ratio depends on the source:

- Resource Utilization / AverageValue and Pods AverageValue: the pods that reported (after the
  missing/unready rebalancing below);
- Object and External ``Value``: pods that are Running and Ready;
- Object and External ``AverageValue``: none — ``ceil(usage / target)``, the tolerance being tested
  on ``usage / (target · status replicas)``.

Missing and unready pods (per-pod metrics): on a scale-down a pod without a sample counts as exactly
the target (Utilization: ``max(100, target)`` % of its request); on a scale-up it counts as 0, and so
do unready pods. If the recomputed ratio is back inside the tolerance band or points the other way,
or the new count moves against the ratio, the current count stands.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from headroom.autoscale.errors import MetricUnavailable
from headroom.autoscale.pods import Pod, PodSample, ReadinessTiming, count_running_and_ready, group_pods

INT32_MAX = 2**31 - 1
DEFAULT_TOLERANCE = 0.1


@dataclass(frozen=True)
class Tolerances:
    """No scaling while ``1 − scale_down ≤ ratio ≤ 1 + scale_up`` (both ends inclusive)."""

    scale_down: float = DEFAULT_TOLERANCE
    scale_up: float = DEFAULT_TOLERANCE

    def within(self, ratio: float) -> bool:
        return (1.0 - self.scale_down) <= ratio <= (1.0 + self.scale_up)


@dataclass(frozen=True)
class Proposal:
    """A metric's replica proposal and the current value reported in the HPA status.

    ``current`` is a percentage for Utilization targets, milli-units otherwise; ``raw_average`` is the
    average milli-value per pod behind a Utilization.
    """

    replicas: int
    current: int
    raw_average: int | None = None


def go_div(numerator: int, denominator: int) -> int:
    """Integer division truncating toward zero, as Go's ``/`` on integers."""
    quotient = abs(numerator) // abs(denominator)
    return quotient if (numerator >= 0) == (denominator > 0) else -quotient


def go_fdiv(numerator: float, denominator: float) -> float:
    """float64 division with IEEE results for a zero denominator (Go does not panic on floats)."""
    if denominator == 0:
        return math.nan if numerator == 0 else math.copysign(math.inf, numerator)
    return numerator / denominator


def ceil_int32(value: float) -> int:
    """``int32(math.Ceil(value))`` clamped to the int32 range (NaN → 0)."""
    if math.isnan(value):
        return 0
    if value >= INT32_MAX:
        return INT32_MAX
    return math.ceil(value)


def resource_utilization_replicas(current_replicas: int, target_percent: int, resource: str,
                                  tolerances: Tolerances, pods: Sequence[Pod],
                                  samples: Mapping[str, PodSample], now: float,
                                  timing: ReadinessTiming = ReadinessTiming()) -> Proposal:
    """Resource metric with a ``Utilization`` target (percent of the pods' requests)."""
    if not samples:
        raise MetricUnavailable(f"no metrics returned from resource metrics API for {resource}")
    if not pods:
        raise MetricUnavailable("no pods returned by selector while calculating replica count")
    groups = group_pods(pods, samples, resource, now, timing)
    metrics = _without({name: s.value for name, s in samples.items()}, groups.ignored | groups.unready)
    if not metrics:
        raise MetricUnavailable("did not receive metrics for targeted pods (pods might be unready)")
    requests = _requests(pods, resource)
    ratio, utilization, raw = _utilization_ratio(metrics, requests, target_percent)

    scale_up_with_unready = bool(groups.unready) and ratio > 1.0
    if not scale_up_with_unready and not groups.missing:
        if tolerances.within(ratio):
            return Proposal(current_replicas, utilization, raw)
        return Proposal(ceil_int32(ratio * groups.ready_count), utilization, raw)

    if groups.missing:
        if ratio < 1.0:
            fallback_percent = max(100, target_percent)
            for name in groups.missing:
                metrics[name] = go_div(requests[name] * fallback_percent, 100)
        elif ratio > 1.0:
            for name in groups.missing:
                metrics[name] = 0
    if scale_up_with_unready:
        for name in groups.unready:
            metrics[name] = 0
    new_ratio, _, _ = _utilization_ratio(metrics, requests, target_percent)
    return Proposal(_rebalanced(current_replicas, ratio, new_ratio, len(metrics), tolerances), utilization, raw)


def pods_average_replicas(current_replicas: int, target_milli: int, tolerances: Tolerances,
                          pods: Sequence[Pod], samples: Mapping[str, PodSample], now: float,
                          resource: str | None = None,
                          timing: ReadinessTiming = ReadinessTiming()) -> Proposal:
    """A per-pod average target: Pods metrics, and Resource metrics with an ``AverageValue`` target.

    ``resource`` is the resource name for the latter (``"cpu"`` turns on the CPU readiness rules).
    """
    if not samples:
        raise MetricUnavailable("no metrics returned from custom metrics API")
    if not pods:
        raise MetricUnavailable("no pods returned by selector while calculating replica count")
    groups = group_pods(pods, samples, resource, now, timing)
    metrics = _without({name: s.value for name, s in samples.items()}, groups.ignored | groups.unready)
    if not metrics:
        raise MetricUnavailable("did not receive metrics for targeted pods (pods might be unready)")
    ratio, usage = _usage_ratio(metrics, target_milli)

    scale_up_with_unready = bool(groups.unready) and ratio > 1.0
    if not scale_up_with_unready and not groups.missing:
        if tolerances.within(ratio):
            return Proposal(current_replicas, usage)
        return Proposal(ceil_int32(ratio * groups.ready_count), usage)

    if groups.missing:
        if ratio < 1.0:
            for name in groups.missing:
                metrics[name] = target_milli
        elif ratio > 1.0:
            for name in groups.missing:
                metrics[name] = 0
    if scale_up_with_unready:
        for name in groups.unready:
            metrics[name] = 0
    new_ratio, _ = _usage_ratio(metrics, target_milli)
    return Proposal(_rebalanced(current_replicas, ratio, new_ratio, len(metrics), tolerances), usage)


def object_value_replicas(current_replicas: int, usage_milli: int, target_milli: int,
                          tolerances: Tolerances, pods: Sequence[Pod]) -> Proposal:
    """Object metric with a ``Value`` target: ``ceil(usage/target · Running-and-Ready pods)``."""
    ratio = go_fdiv(usage_milli, target_milli)
    return Proposal(_usage_ratio_replicas(current_replicas, ratio, tolerances, pods), usage_milli)


def external_value_replicas(current_replicas: int, values_milli: Iterable[int], target_milli: int,
                            tolerances: Tolerances, pods: Sequence[Pod]) -> Proposal:
    """External metric with a ``Value`` target: the series are summed, then as an Object Value."""
    usage = _external_sum(values_milli)
    ratio = go_fdiv(usage, target_milli)
    return Proposal(_usage_ratio_replicas(current_replicas, ratio, tolerances, pods), usage)


def object_average_value_replicas(status_replicas: int, usage_milli: int, target_average_milli: int,
                                  tolerances: Tolerances) -> Proposal:
    """Object metric with an ``AverageValue`` target: ``ceil(usage / target)``, independent of pods."""
    return _per_pod_total_replicas(status_replicas, usage_milli, target_average_milli, tolerances)


def external_average_value_replicas(status_replicas: int, values_milli: Iterable[int],
                                    target_average_milli: int, tolerances: Tolerances) -> Proposal:
    """External metric with an ``AverageValue`` target: the series are summed, then as Object."""
    return _per_pod_total_replicas(status_replicas, _external_sum(values_milli), target_average_milli,
                                   tolerances)


def _per_pod_total_replicas(status_replicas: int, usage: int, target_average: int,
                            tolerances: Tolerances) -> Proposal:
    replicas = status_replicas
    ratio = go_fdiv(usage, target_average * status_replicas)
    if not tolerances.within(ratio):
        replicas = ceil_int32(go_fdiv(usage, target_average))
    current = usage if status_replicas == 0 else math.ceil(usage / status_replicas)
    return Proposal(replicas, current)


def _usage_ratio_replicas(current_replicas: int, ratio: float, tolerances: Tolerances,
                          pods: Sequence[Pod]) -> int:
    if current_replicas == 0:
        return ceil_int32(ratio)
    if tolerances.within(ratio):
        return current_replicas
    if not pods:
        raise MetricUnavailable("unable to calculate ready pods: no pods returned by selector")
    return ceil_int32(ratio * count_running_and_ready(pods))


def _rebalanced(current_replicas: int, ratio: float, new_ratio: float, counted: int,
                tolerances: Tolerances) -> int:
    if tolerances.within(new_ratio) or (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return current_replicas
    proposal = ceil_int32(new_ratio * counted)
    if (new_ratio < 1.0 and proposal > current_replicas) or (new_ratio > 1.0 and proposal < current_replicas):
        return current_replicas
    return proposal


def _utilization_ratio(metrics: Mapping[str, int], requests: Mapping[str, int],
                       target_percent: int) -> tuple[float, int, int]:
    metrics_total = requests_total = entries = 0
    for name, value in metrics.items():
        if name not in requests:
            continue  # a sample for a pod the selector no longer lists
        metrics_total += value
        requests_total += requests[name]
        entries += 1
    if requests_total == 0:
        raise MetricUnavailable("no metrics returned matched known pods")
    utilization = max(-INT32_MAX - 1, min(INT32_MAX, go_div(metrics_total * 100, requests_total)))
    return utilization / target_percent, utilization, go_div(metrics_total, entries)


def _usage_ratio(metrics: Mapping[str, int], target_milli: int) -> tuple[float, int]:
    usage = go_div(sum(metrics.values()), len(metrics))
    return usage / target_milli, usage


def _requests(pods: Sequence[Pod], resource: str) -> dict[str, int]:
    requests = {}
    for pod in pods:
        if resource not in pod.requests:
            raise MetricUnavailable(f"missing request for {resource} in pod {pod.name}")
        requests[pod.name] = pod.requests[resource]
    return requests


def _external_sum(values_milli: Iterable[int]) -> int:
    values = list(values_milli)
    if not values:
        raise MetricUnavailable("no metrics returned from external metrics API")
    return sum(values)


def _without(metrics: dict[str, int], names: Iterable[str]) -> dict[str, int]:
    for name in names:
        metrics.pop(name, None)
    return metrics
