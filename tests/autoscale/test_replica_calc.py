"""The replica-calculator vectors of hpa-vectors.md (Kubernetes' replica_calculator_test.go), one row each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from headroom.autoscale.errors import MetricUnavailable
from headroom.autoscale.pods import Pod, PodPhase, PodSample, ReadinessTiming
from headroom.autoscale.replica_calc import (
    Tolerances,
    external_average_value_replicas,
    external_value_replicas,
    object_average_value_replicas,
    object_value_replicas,
    pods_average_replicas,
    resource_utilization_replicas,
)

# The timing the Kubernetes unit tests use; pods started long before NOW.
TIMING = ReadinessTiming(cpu_initialization_period=120.0, initial_readiness_delay=10.0)
NOW = 10_000.0
T, F = True, False
R, P, X = PodPhase.RUNNING, PodPhase.PENDING, PodPhase.FAILED


HOT = NOW - 60.0  # started 1 min ago: inside the CPU initialization period
COOL = NOW - 180.0  # started 3 min ago: past it


def make_pods(count: int, requests: Sequence[int] = (), ready: Sequence[bool] = (),
              phase: Sequence[PodPhase] = (), started: Sequence[float] = (),
              deleting: Sequence[bool] = ()) -> tuple[Pod, ...]:
    return tuple(
        Pod(name=f"pod-{i}",
            ready=ready[i] if ready else True,
            phase=phase[i] if phase else R,
            started_at=started[i] if started else 0.0,
            deleting=deleting[i] if deleting else False,
            requests={"cpu": requests[i]} if requests else {})
        for i in range(count))


def make_samples(levels: Sequence[int], at: float = NOW) -> dict[str, PodSample]:
    return {f"pod-{i}": PodSample(level, timestamp=at) for i, level in enumerate(levels)}


@dataclass(frozen=True)
class CpuCase:
    current: int
    target_percent: int
    requests: Sequence[int]
    levels: Sequence[int]
    expected: int
    expected_utilization: int
    ready: Sequence[bool] = ()
    phase: Sequence[PodPhase] = ()
    tolerances: Tolerances = Tolerances()
    pod_count: int | None = None
    started: Sequence[float] = ()
    deleting: Sequence[bool] = ()
    sampled_at: float = NOW


# Beyond hpa-vectors.md: the upstream cases for the CPU initialization period ("hot" pods), deleted
# pods and rolling updates. As upstream, their samples carry the zero timestamp.
EXTRA_CPU_CASES = {
    "ScaleUpHotCpuLessScale": CpuCase(3, 30, [1000] * 3, [300, 500, 700], 4, 60, started=[HOT, COOL, COOL],
                                      sampled_at=0.0),
    "ScaleHotCpuNoScale": CpuCase(3, 30, [1000] * 3, [400, 500, 700], 3, 40, ready=[T, F, F],
                                  started=[COOL, HOT, HOT], sampled_at=0.0),
    "ScaleDownIgnoreHotCpuPods": CpuCase(5, 50, [1000] * 5, [100, 300, 500, 250, 250], 2, 30,
                                         started=[COOL, COOL, COOL, HOT, HOT], sampled_at=0.0),
    "MissingMetricsHotCpuNoChange": CpuCase(3, 50, [1000] * 3, [100, 450], 3, 45, started=[HOT, COOL, COOL],
                                            sampled_at=0.0),
    "MissingMetricsHotCpuScaleUp": CpuCase(3, 50, [1000] * 3, [100, 2000], 4, 200, ready=[F, T, T],
                                           started=[HOT, COOL, COOL], sampled_at=0.0),
    "ScaleUpIgnoresDeletionPods": CpuCase(2, 30, [1000] * 4, [500, 700], 4, 60, ready=[T, T, F, F],
                                          deleting=[F, F, T, T]),
    "DuringRollingUpdateWithMaxSurge": CpuCase(2, 50, [1000] * 3, [100, 100], 2, 10, pod_count=3),
}

CPU_CASES = {
    "ScaleUp": CpuCase(3, 30, [1000] * 3, [300, 500, 700], 5, 50),
    "ScaleUpUnreadyLessScale": CpuCase(3, 30, [1000] * 3, [300, 500, 700], 4, 60, ready=[F, T, T]),
    "ScaleUpUnreadyNoScale": CpuCase(3, 30, [1000] * 3, [400, 500, 700], 3, 40, ready=[T, F, F]),
    "ScaleUpIgnoresFailedPods": CpuCase(2, 30, [1000] * 4, [500, 700], 4, 60, ready=[T, T, F, F],
                                        phase=[R, R, X, X]),
    "ScaleDown": CpuCase(5, 50, [1000] * 5, [100, 300, 500, 250, 250], 3, 28),
    "ScaleDownExcludeUnreadyPods": CpuCase(5, 50, [1000] * 5, [100, 300, 500, 250, 250], 2, 30,
                                           ready=[T, T, T, F, F]),
    "ScaleDownExcludeUnscheduledPods": CpuCase(5, 50, [1000] * 5, [100], 1, 10, ready=[T, F, F, F, F],
                                               phase=[R, P, P, P, P]),
    "Tolerance": CpuCase(3, 100, [900, 1000, 1100], [1010, 1030, 1020], 3, 102),
    "ConfigurableTolerance{0,0}": CpuCase(3, 100, [900, 1000, 1100], [909, 1010, 1111], 4, 101,
                                          tolerances=Tolerances(0.0, 0.0)),
    "ConfigurableTolerance{0.1,2.0}": CpuCase(3, 100, [900, 1000, 1100], [1890, 1910, 1900], 3, 190,
                                              tolerances=Tolerances(0.1, 2.0)),
    "ConfigurableTolerance{2.0,0.08}": CpuCase(3, 100, [900, 1000, 1100], [1100, 1080, 1090], 4, 109,
                                               tolerances=Tolerances(2.0, 0.08)),
    "ConfigurableTolerance{0.36,0.1}": CpuCase(3, 100, [900, 1000, 1100], [660, 640, 650], 3, 65,
                                               tolerances=Tolerances(0.36, 0.1)),
    "ConfigurableTolerance{0.34,0.1}": CpuCase(3, 100, [900, 1000, 1100], [660, 640, 650], 2, 65,
                                               tolerances=Tolerances(0.34, 0.1)),
    "SuperfluousMetrics": CpuCase(4, 100, [1000] * 4, [4000, 9500, 3000, 7000, 3200, 2000], 24, 587, pod_count=4),
    "MissingMetrics": CpuCase(4, 100, [1000] * 4, [400, 95], 3, 24),
    "MissingMetricsNoChangeEq": CpuCase(2, 100, [1000] * 2, [1000], 2, 100),
    "MissingMetricsNoChangeGt": CpuCase(2, 100, [1000] * 2, [1900], 2, 190),
    "MissingMetricsNoChangeLt": CpuCase(2, 100, [1000] * 2, [600], 2, 60),
    "MissingMetricsUnreadyScaleUp": CpuCase(3, 50, [1000] * 3, [100, 2000], 4, 200, ready=[F, T, T]),
    "MissingMetricsUnreadyScaleDown": CpuCase(4, 50, [1000] * 4, [100, 100, 100], 3, 10, ready=[F, T, T, T]),
    "MissingMetricsScaleDownTargetOver100": CpuCase(4, 300, [1000, 1000, 2000, 2000], [200, 100, 100], 2, 6,
                                                    ready=[F, T, T, T]),
}


ALL_CPU_CASES = CPU_CASES | EXTRA_CPU_CASES


@pytest.mark.parametrize("case", ALL_CPU_CASES.values(), ids=ALL_CPU_CASES.keys())
def test_resource_utilization_vectors(case: CpuCase) -> None:
    count = case.pod_count or max(case.current, len(case.requests))
    pods = make_pods(count, case.requests, case.ready, case.phase, case.started, case.deleting)
    proposal = resource_utilization_replicas(case.current, case.target_percent, "cpu", case.tolerances,
                                             pods, make_samples(case.levels, case.sampled_at), NOW, TIMING)
    assert (proposal.replicas, proposal.current) == (case.expected, case.expected_utilization)


@dataclass(frozen=True)
class PodsCase:
    current: int
    target: int
    levels: Sequence[int]
    expected: int
    expected_usage: int
    ready: Sequence[bool] = ()
    tolerances: Tolerances = Tolerances()
    pod_count: int | None = None


PODS_CASES = {
    "ScaleUpCM": PodsCase(3, 15000, [20000, 10000, 30000], 4, 20000),
    "ScaleUpCMUnreadyHotCpuNoLessScale": PodsCase(3, 15000, [50000, 10000, 30000], 6, 30000, ready=[T, T, F]),
    "ScaleUpCMUnreadyHotCpuScaleWouldScaleDown": PodsCase(3, 15000, [50000, 15000, 30000], 7, 31666,
                                                          ready=[F, T, F]),
    "ScaleDownCM": PodsCase(5, 20000, [12000] * 5, 3, 12000),
    "ToleranceCM": PodsCase(3, 20000, [20000, 21000, 21000], 3, 20666),
    "ConfigurableToleranceCM": PodsCase(3, 20000, [20000, 21000, 21000], 4, 20666,
                                        tolerances=Tolerances(0.1, 0.01)),
    "PlainMetricMissingMetricsNoChangeEq": PodsCase(5, 20000, [20000, 19000, 21000], 5, 20000),
    "llm-queue-avg-10-vs-target-5": PodsCase(4, 5000, [12000, 9000, 8000, 11000], 8, 10000),
    "llm-queue-inside-tolerance": PodsCase(4, 5000, [5000, 5000, 5000, 6000], 4, 5250),
    "DuringRollingUpdateWithMaxSurgeCM": PodsCase(2, 17000, [10000, 10000], 2, 10000, pod_count=3),
}


@pytest.mark.parametrize("case", PODS_CASES.values(), ids=PODS_CASES.keys())
def test_pods_metric_vectors(case: PodsCase) -> None:
    pods = make_pods(case.pod_count or case.current, ready=case.ready)
    proposal = pods_average_replicas(case.current, case.target, case.tolerances, pods,
                                     make_samples(case.levels), NOW, None, TIMING)
    assert (proposal.replicas, proposal.current) == (case.expected, case.expected_usage)


VALUE_CASES = {
    # (kind, current, ready flags, usage, target, expected)
    "ScaleUpCMObject": ("object", 3, [T, T, T], 20000, 15000, 4),
    "ScaleUpCMObjectIgnoresUnreadyPods": ("object", 3, [F, T, F], 50000, 10000, 5),
    "ScaleUpCMExternal": ("external", 1, [T], 8600, 4400, 2),
    "ScaleUpCMExternalIgnoresUnreadyPods": ("external", 3, [F, T, F], 8600, 4400, 2),
    "ScaleDownCMExternal": ("external", 5, [T] * 5, 8600, 14334, 3),
    "ToleranceCMExternal": ("external", 3, [T] * 3, 8600, 8888, 3),
}


@pytest.mark.parametrize("case", VALUE_CASES.values(), ids=VALUE_CASES.keys())
def test_value_target_vectors(case: tuple) -> None:
    kind, current, ready, usage, target, expected = case
    pods = make_pods(current, ready=ready)
    if kind == "object":
        proposal = object_value_replicas(current, usage, target, Tolerances(), pods)
    else:
        proposal = external_value_replicas(current, [usage], target, Tolerances(), pods)
    assert proposal.replicas == expected


AVERAGE_VALUE_CASES = {
    # (kind, status replicas, usage, per-pod target, expected replicas, expected per-pod current)
    "ScaleUpCMPerPodObject": ("object", 3, 20000, 5000, 4, 6667),
    "ScaleDownPerPodCMObject": ("object", 5, 6000, 2000, 3, 1200),
    "ScaleUpPerPodCMExternal": ("external", 3, 8600, 2150, 4, 2867),
    "ScaleDownPerPodCMExternal": ("external", 5, 8600, 2867, 3, 1720),
    "TolerancePerPodCMExternal": ("external", 3, 8600, 2900, 3, 2867),
}


@pytest.mark.parametrize("case", AVERAGE_VALUE_CASES.values(), ids=AVERAGE_VALUE_CASES.keys())
def test_average_value_target_vectors(case: tuple) -> None:
    kind, status, usage, target, expected, expected_current = case
    if kind == "object":
        proposal = object_average_value_replicas(status, usage, target, Tolerances())
    else:
        proposal = external_average_value_replicas(status, [usage], target, Tolerances())
    assert (proposal.replicas, proposal.current) == (expected, expected_current)


def test_external_value_from_zero_replicas_ignores_pods_and_tolerance() -> None:
    assert external_value_replicas(0, [4000, 4100], 4400, Tolerances(), ()).replicas == 2


@pytest.mark.parametrize("call", [
    lambda: pods_average_replicas(3, 1000, Tolerances(), make_pods(3), {}, NOW),
    lambda: pods_average_replicas(3, 1000, Tolerances(), (), make_samples([1, 2, 3]), NOW),
    lambda: resource_utilization_replicas(1, 100, "cpu", Tolerances(), make_pods(1), make_samples([200]), NOW),
    lambda: external_value_replicas(3, [], 1000, Tolerances(), make_pods(3)),
    lambda: pods_average_replicas(2, 1000, Tolerances(), make_pods(2, phase=[P, P]), make_samples([5, 5]), NOW),
], ids=["no-samples", "no-pods", "missing-cpu-request", "no-external-series", "only-pending-pods"])
def test_unusable_metric_raises(call) -> None:
    with pytest.raises(MetricUnavailable):
        call()
