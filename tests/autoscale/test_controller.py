"""Whole reconciles: pre-checks, several metrics and the broken-metric rule, history across syncs."""

from __future__ import annotations

import pytest

from headroom.autoscale.controller import ControllerSettings, HpaController, ScaleTarget, sync_times
from headroom.autoscale.metrics_source import StaticMetrics
from headroom.autoscale.pods import Pod, PodSample
from headroom.autoscale.spec import (
    Behavior,
    HpaSpec,
    MetricSpec,
    MetricTarget,
    PolicyType,
    ScalingPolicy,
    ScalingRules,
    SourceType,
    TargetType,
)

CPU_30 = MetricSpec(SourceType.RESOURCE, "cpu", MetricTarget(TargetType.UTILIZATION, 30))
CPU_50 = MetricSpec(SourceType.RESOURCE, "cpu", MetricTarget(TargetType.UTILIZATION, 50))
QUEUE_5 = MetricSpec(SourceType.PODS, "vllm:num_requests_waiting", MetricTarget(TargetType.AVERAGE_VALUE, 5000))
EXTERNAL_QPS = MetricSpec(SourceType.EXTERNAL, "qps", MetricTarget(TargetType.VALUE, 4400))


# Pods started at 0; CPU samples count once the CPU initialization period (300 s) is over.
LATER = 1000.0


def cpu_pods(count: int, request: int = 1000) -> tuple[Pod, ...]:
    return tuple(Pod(f"pod-{i}", requests={"cpu": request}) for i in range(count))


def samples(*levels: int) -> dict[str, PodSample]:
    return {f"pod-{i}": PodSample(level) for i, level in enumerate(levels)}


def test_upscale_cap_uses_legacy_factor() -> None:
    spec = HpaSpec(max_replicas=100, metrics=(MetricSpec(SourceType.RESOURCE, "cpu",
                                                         MetricTarget(TargetType.UTILIZATION, 10)),))
    controller = HpaController(spec, ControllerSettings(legacy_scale_up_factor=8.0))
    metrics = StaticMetrics(pods={"resource/cpu": samples(100, 200, 300)})
    result = controller.sync(LATER, ScaleTarget(3, cpu_pods(3, request=100)), metrics)
    assert (result.metric_desired, result.desired) == (60, 24)


def test_no_scale_down_while_one_metric_is_invalid() -> None:
    spec = HpaSpec(max_replicas=10, metrics=(CPU_50, EXTERNAL_QPS))
    metrics = StaticMetrics(pods={"resource/cpu": samples(100, 300, 500, 250, 250)})  # external missing
    result = HpaController(spec).sync(LATER, ScaleTarget(5, cpu_pods(5)), metrics)
    assert result.desired == 5 and not result.rescaled
    assert [o.error is None for o in result.outcomes] == [True, False]


def test_scale_up_while_one_metric_is_empty() -> None:
    spec = HpaSpec(max_replicas=10, metrics=(CPU_30, EXTERNAL_QPS))
    metrics = StaticMetrics(pods={"resource/cpu": samples(300, 400, 500)}, external={"external/qps": []})
    result = HpaController(spec).sync(LATER, ScaleTarget(3, cpu_pods(3)), metrics)
    assert result.desired == 4


def test_all_metrics_invalid_means_no_action() -> None:
    result = HpaController(HpaSpec(max_replicas=10, metrics=(QUEUE_5,))).sync(
        0.0, ScaleTarget(3, cpu_pods(3)), StaticMetrics())
    assert (result.desired, result.metric_desired) == (3, None)


def test_several_metrics_take_the_max() -> None:
    spec = HpaSpec(max_replicas=20, metrics=(CPU_50, QUEUE_5))
    metrics = StaticMetrics(pods={"resource/cpu": samples(100, 300, 500, 250, 250),
                                  "pods/vllm:num_requests_waiting": samples(*[7000] * 5)})
    result = HpaController(spec).sync(LATER, ScaleTarget(5, cpu_pods(5)), metrics)
    assert [o.proposal.replicas for o in result.outcomes] == [3, 7]
    assert result.desired == 7


@pytest.mark.parametrize("current, minimum, maximum, expected", [
    (0, 1, 10, 0), (12, 1, 10, 10), (1, 3, 10, 3),
], ids=["zero-replicas-disables", "above-max", "below-min"])
def test_prechecks(current: int, minimum: int, maximum: int, expected: int) -> None:
    spec = HpaSpec(min_replicas=minimum, max_replicas=maximum, metrics=(QUEUE_5,))
    result = HpaController(spec).sync(0.0, ScaleTarget(current, cpu_pods(current)), StaticMetrics())
    assert result.desired == expected


def test_llm_queue_example_through_the_controller() -> None:
    spec = HpaSpec(max_replicas=16, metrics=(QUEUE_5,))
    metrics = StaticMetrics(pods={QUEUE_5.label: samples(12000, 9000, 8000, 11000)})
    assert HpaController(spec).sync(0.0, ScaleTarget(4, cpu_pods(4)), metrics).desired == 8


def queue_metrics(per_pod: int, pods: int) -> StaticMetrics:
    return StaticMetrics(pods={QUEUE_5.label: samples(*[per_pod] * pods)})


def test_legacy_scale_down_waits_for_the_stabilization_window() -> None:
    controller = HpaController(HpaSpec(max_replicas=20, metrics=(QUEUE_5,)))
    replicas = 8
    history = []
    for now in sync_times(0.0, 600.0, 15.0):
        load = 5000 if now < 60 else 1000  # queue drops at t=60 s
        result = controller.sync(now, ScaleTarget(replicas, cpu_pods(replicas)), queue_metrics(load, replicas))
        replicas = result.desired
        history.append((now, replicas))
    first_drop = next(t for t, r in history if r < 8)
    # The in-band recommendation of t=45 s stays in the legacy window through t=345 s (inclusive).
    assert first_drop == 45.0 + 300.0 + 15.0
    assert dict(history)[first_drop] == 2


def test_behavior_policies_pace_a_scale_up_across_syncs() -> None:
    behavior = Behavior(scale_up=ScalingRules((ScalingPolicy(PolicyType.PODS, 2, 60),), stabilization_window_seconds=0))
    controller = HpaController(HpaSpec(max_replicas=50, metrics=(QUEUE_5,), behavior=behavior))
    replicas, path = 2, []
    for now in sync_times(0.0, 180.0, 15.0):
        result = controller.sync(now, ScaleTarget(replicas, cpu_pods(replicas)), queue_metrics(50000, replicas))
        replicas = result.desired
        path.append(replicas)
    # +2 pods per 60 s window: t=0 → 4, held until t=60 → 6, t=120 → 8.
    assert path == [4, 4, 4, 4, 6, 6, 6, 6, 8, 8, 8, 8]


def test_per_direction_tolerance_comes_from_behavior() -> None:
    behavior = Behavior(scale_up=ScalingRules((ScalingPolicy(PolicyType.PERCENT, 100, 15),), tolerance=0.0))
    controller = HpaController(HpaSpec(max_replicas=10, metrics=(QUEUE_5,), behavior=behavior))
    assert controller.tolerances.scale_up == 0.0 and controller.tolerances.scale_down == 0.1
    result = controller.sync(0.0, ScaleTarget(4, cpu_pods(4)), queue_metrics(5250, 4))
    assert result.desired == 5


def test_sync_times_are_every_period() -> None:
    assert sync_times(0.0, 60.0, 15.0) == [0.0, 15.0, 30.0, 45.0]
