"""A simulated server's ``/metrics``: Prometheus text format, every series of
:data:`contract.server_metrics.SERIES` the simulator exposes (vLLM's and JetStream's names, and
``accelerator_memory_used_bytes``: weights + preallocated KV cache, constant while serving), each valued by the
same-named field of the metrics of the server's :class:`~sim.records.MetricsSnapshot`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from headroom.contract.server_metrics import COUNTER, SERIES
from headroom.metric_table import Family
from headroom.sim.records import MetricsSnapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# each exposed series and its family (a counter's family is named without its samples' _total)
_FAMILIES = tuple((s, Family(s.name.removesuffix("_total") if s.type == COUNTER else s.name, s.type, s.doc,
                             (s.label,))) for s in SERIES if s.exposed)


def metric_families(snap: MetricsSnapshot, model: str) -> Iterator[Metric]:
    for series, family in _FAMILIES:
        made = family.make()
        made.add_metric([model], getattr(snap.metrics, series.field))
        yield made


class _Collector:
    def __init__(self, source: Callable[[], MetricsSnapshot], model: str):
        self._source, self._model = source, model

    def collect(self) -> Iterator[Metric]:
        yield from metric_families(self._source(), self._model)


def metrics_registry(source: Callable[[], MetricsSnapshot], model: str) -> CollectorRegistry:
    """A registry whose every scrape reads a fresh snapshot from ``source``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(source, model))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
