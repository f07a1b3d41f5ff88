"""The signals an LLM pool can scale on, per server and pool-wide, from server metric snapshots.

Input is any object shaped like :class:`ServerMetrics` — ``sim.records.ServerSnapshot`` is one, and so
is a scrape of a real vLLM / JetStream ``/metrics`` endpoint mapped to those fields. Servers still
loading the model (``ready`` false) expose no metrics, so they report no signal: the HPA counts them
as missing pods.

Signals (name → what it measures; the names are the Prometheus series an adapter would serve):

- ``vllm:num_requests_waiting`` — queue size; ``jetstream_prefill_backlog_size`` — prefill backlog.
  The guide's throughput signal: Pods AverageValue target of 3–5 to start.
- ``jetstream_slots_used_percentage`` — batch slots in use (0–1): the latency signal; start just below 1.
- ``vllm:kv_cache_usage_perc`` — KV-cache usage (0–1): tracks accelerator memory actually used.
- ``headroom_accelerator_memory_used_ratio`` — memory in use over capacity. With vLLM / TGI the KV
  cache is preallocated, so this is flat while serving: exported for completeness, useless to scale on.
- ``headroom_predicted_ttft_slo_ratio`` — predicted TTFT over the TTFT SLO (1.0 = at the SLO), from a
  :class:`TtftPredictor`; ``headroom_predicted_ttft_headroom_ms`` is the SLO minus the prediction.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


class ServerMetrics(Protocol):
    """What one server reports at one moment (the fields of ``sim.records.ServerSnapshot``)."""

    @property
    def server_id(self) -> str: ...
    @property
    def num_waiting(self) -> int: ...
    @property
    def num_running(self) -> int: ...
    @property
    def kv_cache_usage(self) -> float: ...
    @property
    def prefill_backlog(self) -> int | None: ...  # None: not reported (the signal is left out)
    @property
    def slots_used(self) -> float | None: ...
    @property
    def memory_used_bytes(self) -> int | None: ...
    @property
    def ready(self) -> bool: ...


class TtftPredictor(Protocol):
    """Predicts the TTFT (ms) a new request would see on a server in the given state."""

    def predict_ttft_ms(self, server: ServerMetrics) -> float | None:
        """The predicted TTFT in ms, or None when there is no prediction for this server."""


@dataclass(frozen=True)
class QueueDrainTtft:
    """A closed-form TTFT estimate: the queue ahead (plus this request) drains at one prefill each.

    ``prefill_ms`` is the mean prefill time of one request; a stand-in where no learned model is at hand.
    """

    prefill_ms: float
    base_ms: float = 0.0

    def predict_ttft_ms(self, server: ServerMetrics) -> float:
        return self.base_ms + (max(server.num_waiting, server.prefill_backlog or 0) + 1) * self.prefill_ms


class Signal(enum.Enum):
    """A scalable signal and the metric name it is served under."""

    QUEUE_SIZE = "vllm:num_requests_waiting"
    PREFILL_BACKLOG = "jetstream_prefill_backlog_size"
    SLOTS_USED = "jetstream_slots_used_percentage"
    KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
    ACCELERATOR_MEMORY = "headroom_accelerator_memory_used_ratio"
    TTFT_SLO_RATIO = "headroom_predicted_ttft_slo_ratio"
    TTFT_HEADROOM_MS = "headroom_predicted_ttft_headroom_ms"


@dataclass(frozen=True)
class SignalContext:
    """What some signals need beyond the snapshot: memory capacity, a TTFT predictor and its SLO."""

    memory_capacity_bytes: int = 80 * 2**30
    ttft_slo_ms: float | None = None
    predictor: TtftPredictor | None = None


def server_signals(server: ServerMetrics, context: SignalContext = SignalContext()) -> dict[Signal, float]:
    """Every signal one ready server reports; empty for a server still loading."""
    if not server.ready:
        return {}
    reported = ((Signal.QUEUE_SIZE, server.num_waiting), (Signal.PREFILL_BACKLOG, server.prefill_backlog),
                (Signal.SLOTS_USED, server.slots_used), (Signal.KV_CACHE_USAGE, server.kv_cache_usage))
    values = {signal: float(value) for signal, value in reported if value is not None}  # unreported: left out
    if server.memory_used_bytes is not None:
        values[Signal.ACCELERATOR_MEMORY] = server.memory_used_bytes / context.memory_capacity_bytes
    if context.predictor is not None and context.ttft_slo_ms is not None:
        predicted = context.predictor.predict_ttft_ms(server)
        if predicted is not None:
            values[Signal.TTFT_SLO_RATIO] = predicted / context.ttft_slo_ms
            values[Signal.TTFT_HEADROOM_MS] = context.ttft_slo_ms - predicted
    return values


@dataclass(frozen=True)
class PoolSignal:
    """One signal over the pool: the ready servers' mean (what a Pods AverageValue target compares),
    their sum and max, and how many servers reported versus how many exist."""

    signal: Signal
    mean: float
    total: float
    maximum: float
    reporting: int
    servers: int


def pool_signals(servers: Sequence[ServerMetrics],
                 context: SignalContext = SignalContext()) -> dict[Signal, PoolSignal]:
    """Every signal aggregated over the pool (servers still loading are counted but do not report)."""
    per_server = [server_signals(s, context) for s in servers]
    result = {}
    for signal in Signal:
        values = [v[signal] for v in per_server if signal in v]
        if values:
            result[signal] = PoolSignal(signal, sum(values) / len(values), sum(values), max(values),
                                        len(values), len(servers))
    return result


def per_pod_milli(servers: Iterable[ServerMetrics], signal: Signal,
                  context: SignalContext = SignalContext()) -> Mapping[str, int]:
    """Per-pod values as a custom-metrics adapter serves them: milli-units, truncated."""
    out = {}
    for server in servers:
        values = server_signals(server, context)
        if signal in values:
            out[server.server_id] = int(values[signal] * 1000)
    return out
