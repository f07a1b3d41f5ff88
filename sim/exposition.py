"""A simulated server's ``/metrics``: Prometheus text format with vLLM's and JetStream's metric names.

vLLM: ``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``
(0-1), ``vllm:prefix_cache_queries_total`` and ``vllm:prefix_cache_hits_total`` (prompt tokens), all
labelled ``model_name``. JetStream: ``jetstream_prefill_backlog_size``, ``jetstream_slots_used_percentage``
(0-1). Plus ``accelerator_memory_used_bytes`` (weights + preallocated KV cache, constant while serving).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from headroom.sim.records import MetricsSnapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def metric_families(snap: MetricsSnapshot, model: str) -> Iterator[Metric]:
    labels = ["model_name"]

    def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=labels)
        family.add_metric([model], value)
        return family

    def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=labels)
        family.add_metric([model], value)
        return family

    yield gauge("vllm:num_requests_running", "Number of requests in model execution batches.", snap.num_running)
    yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", snap.num_waiting)
    yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", snap.kv_cache_usage)
    yield counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                  snap.prefix_cache_queries)
    yield counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                  snap.prefix_cache_hits)
    yield gauge("jetstream_prefill_backlog_size", "Size of prefill queue.", snap.prefill_backlog)
    yield gauge("jetstream_slots_used_percentage", "The percentage of decode slots currently being used.",
                snap.slots_used)
    yield gauge("accelerator_memory_used_bytes", "Accelerator memory in use (weights and KV cache).",
                snap.memory_used_bytes)


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
