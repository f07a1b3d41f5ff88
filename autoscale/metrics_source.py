"""Where the HPA controller reads metric values: a one-method-per-API boundary, and two implementations.

:class:`MetricsSource` mirrors Kubernetes' metrics client (resource metrics API, custom metrics API
for pods and objects, external metrics API). :class:`StaticMetrics` serves fixed values keyed by the
metric's label (``pods/<name>``, ``resource/<name>``, ``object/<name>``, ``external/<name>``);
:class:`ScrapedMetrics` reproduces the pipeline delay — values are scraped every ``scrape_interval``
seconds and reach the controller ``adapter_lag`` seconds later.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from headroom.autoscale.errors import MetricUnavailable
from headroom.autoscale.pods import PodSample
from headroom.autoscale.spec import MetricSpec, SourceType


class MetricsSource(Protocol):
    """Values of the metrics an HPA names; each method raises MetricUnavailable when there are none."""

    def pod_samples(self, metric: MetricSpec, now: float) -> Mapping[str, PodSample]:
        """Per-pod samples for Resource, ContainerResource and Pods metrics."""
        ...

    def object_value(self, metric: MetricSpec, now: float) -> int:
        """The described object's value, milli-units."""
        ...

    def external_values(self, metric: MetricSpec, now: float) -> Sequence[int]:
        """Every series matching the external metric's selector, milli-units."""
        ...


PER_POD_SOURCES = (SourceType.RESOURCE, SourceType.CONTAINER_RESOURCE, SourceType.PODS)


@dataclass(frozen=True)
class StaticMetrics:
    """Fixed metric values by label; a label that is absent reads as an unavailable metric."""

    pods: Mapping[str, Mapping[str, PodSample]] = field(default_factory=dict)
    objects: Mapping[str, int] = field(default_factory=dict)
    external: Mapping[str, Sequence[int]] = field(default_factory=dict)

    def pod_samples(self, metric: MetricSpec, now: float) -> Mapping[str, PodSample]:
        try:
            return self.pods[metric.label]
        except KeyError:
            raise MetricUnavailable(f"no values for {metric.label}") from None

    def object_value(self, metric: MetricSpec, now: float) -> int:
        try:
            return self.objects[metric.label]
        except KeyError:
            raise MetricUnavailable(f"no value for {metric.label}") from None

    def external_values(self, metric: MetricSpec, now: float) -> Sequence[int]:
        try:
            return self.external[metric.label]
        except KeyError:
            raise MetricUnavailable(f"no values for {metric.label}") from None


class ScrapedMetrics:
    """The metric pipeline: scrapes every ``scrape_interval`` s, visible ``adapter_lag`` s after the scrape.

    Feed it with :meth:`record` whenever :meth:`scrape_due` says so; the controller reads :meth:`at`.
    """

    def __init__(self, scrape_interval: float = 15.0, adapter_lag: float = 0.0) -> None:
        if scrape_interval <= 0 or adapter_lag < 0:
            raise ValueError(f"scrape_interval must be > 0 and adapter_lag >= 0, "
                             f"got {scrape_interval} and {adapter_lag}")
        self.scrape_interval = scrape_interval
        self.adapter_lag = adapter_lag
        self._times: list[float] = []
        self._snapshots: list[MetricsSource] = []

    def __len__(self) -> int:
        """Scrapes held (older ones are dropped once no lagged read can reach them)."""
        return len(self._times)

    def scrape_due(self, now: float) -> bool:
        return not self._times or now >= self._times[-1] + self.scrape_interval

    def record(self, now: float, snapshot: MetricsSource) -> None:
        if self._times and now <= self._times[-1]:
            raise ValueError(f"scrapes must move forward in time: {now} after {self._times[-1]}")
        self._times.append(now)
        self._snapshots.append(snapshot)
        horizon = now - self.adapter_lag - 2 * self.scrape_interval
        while len(self._times) > 2 and self._times[1] <= horizon:
            del self._times[0], self._snapshots[0]

    def at(self, now: float) -> MetricsSource:
        """What the controller sees at ``now``: the newest scrape taken at or before ``now − lag``."""
        index = bisect.bisect_right(self._times, now - self.adapter_lag) - 1
        if index < 0:
            return StaticMetrics()
        return self._snapshots[index]
