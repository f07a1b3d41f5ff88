"""Pods as the HPA controller sees them, and its grouping into ready / unready / missing / ignored.

Rules (Kubernetes ``groupPods``):

- deleted or Failed pods are ignored;
- Pending pods are unready;
- a pod with no sample is missing;
- for the ``cpu`` resource only, a pod is also unready when its Ready condition is absent or it has
  no start time, or — within the CPU initialization period after start — when it is not Ready or its
  sample was taken less than one metric window after the last readiness change, or — after that
  period — when it is not Ready and has never been Ready (the readiness change came within the
  initial-readiness delay of the start);
- every other metric counts a Running pod that reports a sample, Ready or not.

Times are seconds on the simulation clock.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


class PodPhase(enum.Enum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True)
class Pod:
    """A pod of the scale target.

    ``ready`` is the Ready condition (``None``: no condition yet). ``requests`` maps a resource name to
    the pod's summed container requests in milli-units (needed for Resource metrics only).
    """

    name: str
    phase: PodPhase = PodPhase.RUNNING
    ready: bool | None = True
    deleting: bool = False
    started_at: float | None = 0.0
    ready_changed_at: float = 0.0
    requests: Mapping[str, int] = field(default_factory=dict)

    @property
    def running_and_ready(self) -> bool:
        return self.phase is PodPhase.RUNNING and self.ready is True


@dataclass(frozen=True)
class PodSample:
    """One pod's metric value in milli-units, with when it was taken and the window it covers."""

    value: int
    timestamp: float = 0.0
    window: float = 60.0


@dataclass(frozen=True)
class ReadinessTiming:
    """The controller's pod-readiness settings (``--horizontal-pod-autoscaler-*`` flags)."""

    cpu_initialization_period: float = 300.0
    initial_readiness_delay: float = 30.0


@dataclass(frozen=True)
class PodGroups:
    ready_count: int
    unready: frozenset[str]
    missing: frozenset[str]
    ignored: frozenset[str]


def group_pods(pods: Iterable[Pod], samples: Mapping[str, PodSample], resource: str | None,
               now: float, timing: ReadinessTiming = ReadinessTiming()) -> PodGroups:
    """Split ``pods`` the way the controller does before averaging a per-pod metric."""
    ready_count = 0
    unready: set[str] = set()
    missing: set[str] = set()
    ignored: set[str] = set()
    for pod in pods:
        if pod.deleting or pod.phase is PodPhase.FAILED:
            ignored.add(pod.name)
            continue
        if pod.phase is PodPhase.PENDING:
            unready.add(pod.name)
            continue
        sample = samples.get(pod.name)
        if sample is None:
            missing.add(pod.name)
            continue
        if resource == "cpu" and _cpu_sample_unready(pod, sample, now, timing):
            unready.add(pod.name)
            continue
        ready_count += 1
    return PodGroups(ready_count, frozenset(unready), frozenset(missing), frozenset(ignored))


def _cpu_sample_unready(pod: Pod, sample: PodSample, now: float, timing: ReadinessTiming) -> bool:
    if pod.ready is None or pod.started_at is None:
        return True
    if pod.started_at + timing.cpu_initialization_period > now:
        return pod.ready is False or sample.timestamp < pod.ready_changed_at + sample.window
    return pod.ready is False and pod.started_at + timing.initial_readiness_delay > pod.ready_changed_at


def count_running_and_ready(pods: Iterable[Pod]) -> int:
    """Pods both Running and Ready (what Object and External Value targets multiply by)."""
    return sum(1 for pod in pods if pod.running_and_ready)
