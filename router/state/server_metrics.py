"""Reading a model server's Prometheus ``/metrics`` text into the few numbers scheduling needs.

vLLM: ``vllm:num_requests_waiting``, ``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc`` (older
releases: ``vllm:gpu_cache_usage_perc``), all fractions 0-1 for usage. JetStream:
``jetstream_prefill_backlog_size`` (waiting) and ``jetstream_slots_used_percentage`` (used as usage;
JetStream reports no running count). A server exposing both families is read by its vLLM names (the
JetStream ones are kept apart, for the autoscaling signals). Counts are summed over label sets (several
models on one server), usage takes the maximum. ``accelerator_memory_used_bytes`` is read when present.
Text that names none of the scheduling metrics raises :class:`MetricsFormatError`. Only the lines of these
metrics are parsed (a server exports dozens of others, scraped every 50 ms), and those strictly:
``name{labels} value [timestamp]`` or ``name value [timestamp]``.
"""

from __future__ import annotations

from dataclasses import dataclass

from headroom.errors import HeadroomError

VLLM_WAITING, JETSTREAM_BACKLOG = "vllm:num_requests_waiting", "jetstream_prefill_backlog_size"
RUNNING = "vllm:num_requests_running"
VLLM_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
JETSTREAM_SLOTS = "jetstream_slots_used_percentage"
MEMORY = "accelerator_memory_used_bytes"
SUMMED = (VLLM_WAITING, JETSTREAM_BACKLOG, RUNNING, MEMORY)
PEAK = (*VLLM_USAGE, JETSTREAM_SLOTS)
READ = (*SUMMED, *PEAK)


class MetricsFormatError(HeadroomError, ValueError):
    """The metrics text is not Prometheus text, or carries no metric the router understands."""


@dataclass(frozen=True, slots=True)
class ServerMetrics:
    kv_cache_usage: float
    num_waiting: int
    num_running: int
    slots_used: float | None = None  # JetStream's decode slots in use, 0-1, when reported
    prefill_backlog: int | None = None  # JetStream's prefill queue, when reported
    memory_used_bytes: int | None = None


def parse_metrics(text: str) -> ServerMetrics:
    """The scheduling metrics in Prometheus exposition ``text``."""
    sums: dict[str, float] = {}
    peaks: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(READ):
            continue
        name, value = _sample(line)
        if name in SUMMED:
            sums[name] = sums.get(name, 0.0) + value
        elif name in PEAK:
            peaks[name] = max(peaks.get(name, value), value)
    vllm = VLLM_WAITING in sums or RUNNING in sums or any(name in peaks for name in VLLM_USAGE)
    jetstream = JETSTREAM_BACKLOG in sums or JETSTREAM_SLOTS in peaks
    if not (vllm or jetstream):
        names = (VLLM_WAITING, RUNNING, *VLLM_USAGE, JETSTREAM_BACKLOG, JETSTREAM_SLOTS)
        raise MetricsFormatError(f"none of the metrics {', '.join(names)} is present")
    if vllm:
        waiting = sums.get(VLLM_WAITING, 0.0)
        usage = max((peaks[name] for name in VLLM_USAGE if name in peaks), default=0.0)
    else:
        waiting, usage = sums.get(JETSTREAM_BACKLOG, 0.0), peaks.get(JETSTREAM_SLOTS, 0.0)
    return ServerMetrics(kv_cache_usage=min(1.0, max(0.0, usage)), num_waiting=max(0, int(round(waiting))),
                         num_running=max(0, int(round(sums.get(RUNNING, 0.0)))),
                         slots_used=peaks.get(JETSTREAM_SLOTS),
                         prefill_backlog=int(sums[JETSTREAM_BACKLOG]) if JETSTREAM_BACKLOG in sums else None,
                         memory_used_bytes=int(sums[MEMORY]) if MEMORY in sums else None)


def _sample(line: str) -> tuple[str, float]:
    """The name and value of a sample line (labels are skipped: the value follows the last ``}``)."""
    brace, space = line.find("{"), line.find(" ")
    if brace != -1 and (space == -1 or brace < space):
        name, closed = line[:brace], line.rfind("}")
        fields = line[closed + 1:].split() if closed > brace else []
    else:
        name, fields = (line[:space], line[space:].split()) if space != -1 else (line, [])
    try:
        if not fields or len(fields) > 2:
            raise ValueError("expected a value and an optional timestamp")
        return name, float(fields[0])
    except ValueError as err:
        raise MetricsFormatError(f"not Prometheus text: {line!r}: {err}") from None
