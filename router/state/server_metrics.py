"""Reading a model server's Prometheus ``/metrics`` text into the few numbers scheduling needs.

vLLM: ``vllm:num_requests_waiting``, ``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc`` (older
releases: ``vllm:gpu_cache_usage_perc``), all fractions 0-1 for usage. JetStream:
``jetstream_prefill_backlog_size`` (waiting) and ``jetstream_slots_used_percentage`` (used as usage;
JetStream reports no running count). Counts are summed over label sets (several models on one server),
usage takes the maximum. Text that names none of these raises :class:`MetricsFormatError`.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

WAITING = ("vllm:num_requests_waiting", "jetstream_prefill_backlog_size")
RUNNING = ("vllm:num_requests_running",)
USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "jetstream_slots_used_percentage")


class MetricsFormatError(ValueError):
    """The metrics text is not Prometheus text, or carries no metric the router understands."""


@dataclass(frozen=True, slots=True)
class ServerMetrics:
    kv_cache_usage: float
    num_waiting: int
    num_running: int


def parse_metrics(text: str) -> ServerMetrics:
    """The scheduling metrics in Prometheus exposition ``text``."""
    sums: dict[str, float] = {}
    usage: float | None = None
    found = False
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in WAITING or sample.name in RUNNING:
                    sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
                    found = True
                elif sample.name in USAGE:
                    usage = sample.value if usage is None else max(usage, sample.value)
                    found = True
    except ValueError as err:
        raise MetricsFormatError(f"not Prometheus text: {err}") from err
    if not found:
        raise MetricsFormatError(f"none of the metrics {', '.join(WAITING + RUNNING + USAGE)} is present")
    waiting = sum(sums.get(name, 0.0) for name in WAITING)
    running = sum(sums.get(name, 0.0) for name in RUNNING)
    return ServerMetrics(kv_cache_usage=min(1.0, max(0.0, usage or 0.0)),
                         num_waiting=max(0, int(round(waiting))), num_running=max(0, int(round(running))))
