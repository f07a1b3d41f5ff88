"""The signals an LLM pool can scale on, per server and pool-wide, from server metric snapshots.

Input is any object shaped like :class:`ReportedMetrics`: a server, whether it is ready and its
:class:`~contract.server_metrics.ServerMetrics` — the simulator's ``sim.records.MetricsSnapshot`` is one,
and so is the router's scrape of a real vLLM / JetStream ``/metrics`` endpoint. Servers still loading the
model (``ready`` false) expose no metrics, so they report no signal: the HPA counts them as missing pods.

Each :class:`Signal` is one Prometheus series (its value is the series name); a model server's are named
by their declaration (:data:`contract.server_metrics.SERIES`, looked up by server kind and field), and which
model server release exports which is :mod:`autoscale.servers`' business:

- ``QUEUE_SIZE`` / ``PREFILL_BACKLOG`` — vLLM's waiting requests / JetStream's prefill backlog, the guide's
  throughput signal (Pods AverageValue target 3–5 to start);
- ``BATCH_SIZE`` — vLLM's running requests; ``SLOTS_USED`` — JetStream's decode slots in use (0–1), the
  latency signal (start just below a full batch, "just below 1" for slots);
- ``KV_CACHE_USAGE`` (``GPU_CACHE_USAGE``, its older name, before vLLM 0.10) — KV-cache usage (0–1);
- ``memory_used`` — accelerator memory in use, bytes (the TPU device plugin's series, not the model
  server's): weights plus the KV cache in use. vLLM and TGI preallocate the KV cache, so their memory bytes
  are flat while serving;
- ``headroom_accelerator_memory_used_ratio`` — the router's memory-in-use over capacity;
- ``headroom_predicted_ttft_slo_ratio`` — predicted TTFT over the TTFT SLO (1.0 = at the SLO), from a
  :class:`TtftPredictor` (the learned model); ``headroom_predicted_ttft_headroom_ms`` is the SLO minus
  the prediction.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from headroom.contract.server_metrics import JETSTREAM, SERIES_BY_NAME, VLLM, ServerMetrics, series_name


class ReportedMetrics(Protocol):
    """What one server reports at one moment (a field of its metrics that is None: not reported, the signal
    left out)."""

    @property
    def server_id(self) -> str: ...
    @property
    def metrics(self) -> ServerMetrics: ...
    @property
    def ready(self) -> bool: ...


class TtftPredictor(Protocol):
    """Predicts the TTFT (ms) a reference request would see on each of the given servers."""

    def predict_ttft_ms(self, servers: Sequence[ReportedMetrics]) -> Mapping[str, float]:
        """Server id → predicted TTFT in ms; servers without a prediction are left out."""


class Signal(enum.Enum):
    """A scalable signal, valued by the Prometheus series it is served under."""

    QUEUE_SIZE = series_name(VLLM, "num_waiting")
    BATCH_SIZE = series_name(VLLM, "num_running")
    KV_CACHE_USAGE = series_name(VLLM, "kv_cache_usage")
    GPU_CACHE_USAGE = series_name(VLLM, "kv_cache_usage", older=True)
    PREFILL_BACKLOG = series_name(JETSTREAM, "prefill_backlog")
    SLOTS_USED = series_name(JETSTREAM, "slots_used")
    HBM_USED_BYTES = "memory_used"  # the TPU device plugin's
    ACCELERATOR_MEMORY = "headroom_accelerator_memory_used_ratio"
    TTFT_SLO_RATIO = "headroom_predicted_ttft_slo_ratio"
    TTFT_HEADROOM_MS = "headroom_predicted_ttft_headroom_ms"

    @property
    def headroom_own(self) -> bool:
        """Computed by headroom's router rather than exported by the model server."""
        return self.value.startswith("headroom_")


# each signal that is a model server's series, and the field of ServerMetrics that series carries
_SERIES_FIELDS = tuple((signal, SERIES_BY_NAME[signal.value].field) for signal in Signal
                       if signal.value in SERIES_BY_NAME)


@dataclass(frozen=True)
class SignalContext:
    """What some signals need beyond the snapshot: memory sizes, a TTFT predictor and its SLO.

    ``weights_bytes`` and ``kv_capacity_bytes`` give the memory in use of a server that allocates its
    KV cache as it fills (weights + usage × capacity); without them ``memory_used`` is left out.
    """

    memory_capacity_bytes: int = 80 * 2**30
    ttft_slo_ms: float | None = None
    predictor: TtftPredictor | None = None
    weights_bytes: int | None = None
    kv_capacity_bytes: int | None = None


def pool_signals_by_server(servers: Sequence[ReportedMetrics],
                           context: SignalContext = SignalContext()) -> dict[str, dict[Signal, float]]:
    """Every signal of every ready server (servers still loading are left out)."""
    ready = [s for s in servers if s.ready]
    predicted: Mapping[str, float] = {}
    if context.predictor is not None and context.ttft_slo_ms is not None and ready:
        predicted = context.predictor.predict_ttft_ms(ready)
    return {s.server_id: _signals(s, context, predicted.get(s.server_id)) for s in ready}


def server_signals(server: ReportedMetrics, context: SignalContext = SignalContext()) -> dict[Signal, float]:
    """Every signal one ready server reports; empty for a server still loading."""
    return pool_signals_by_server([server], context).get(server.server_id, {})


def _signals(server: ReportedMetrics, context: SignalContext, predicted_ms: float | None) -> dict[Signal, float]:
    metrics = server.metrics
    reported = ((signal, getattr(metrics, field)) for signal, field in _SERIES_FIELDS)
    values = {signal: float(value) for signal, value in reported if value is not None}  # unreported: left out
    usage = metrics.kv_cache_usage
    if metrics.memory_used_bytes is not None:
        values[Signal.ACCELERATOR_MEMORY] = metrics.memory_used_bytes / context.memory_capacity_bytes
    if context.weights_bytes is not None and context.kv_capacity_bytes is not None:
        values[Signal.HBM_USED_BYTES] = float(context.weights_bytes + int(usage * context.kv_capacity_bytes))
    if predicted_ms is not None and context.ttft_slo_ms is not None:
        values[Signal.TTFT_SLO_RATIO] = predicted_ms / context.ttft_slo_ms
        values[Signal.TTFT_HEADROOM_MS] = context.ttft_slo_ms - predicted_ms
    return values


@dataclass(frozen=True)
class PoolSignal:
    """One signal over the pool: the ready servers' mean (what a Pods AverageValue target compares)
    and sum (what an External AverageValue target divides), and how many servers reported of how many."""

    signal: Signal
    mean: float
    total: float
    reporting: int
    servers: int


def pool_signals(servers: Sequence[ReportedMetrics], context: SignalContext = SignalContext(),
                 by_server: Mapping[str, Mapping[Signal, float]] | None = None) -> dict[Signal, PoolSignal]:
    """Every signal aggregated over the pool (servers still loading are counted but do not report);
    ``by_server`` is :func:`pool_signals_by_server` of the same servers when already computed."""
    per_server = list((by_server if by_server is not None else pool_signals_by_server(servers, context)).values())
    result = {}
    for signal in Signal:
        values = [v[signal] for v in per_server if signal in v]
        if values:
            result[signal] = PoolSignal(signal, sum(values) / len(values), sum(values), len(values), len(servers))
    return result


def per_pod_milli(servers: Iterable[ReportedMetrics], signal: Signal,
                  context: SignalContext = SignalContext()) -> Mapping[str, int]:
    """Per-pod values as a custom-metrics adapter serves them: milli-units, truncated."""
    by_server = pool_signals_by_server(list(servers), context)
    return {sid: int(values[signal] * 1000) for sid, values in by_server.items() if signal in values}
