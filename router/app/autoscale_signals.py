"""The router's autoscaling signals (SPEC §6) on its ``/metrics``, computed by :mod:`contract.scaling_signals`.

Per server and over the pool: queue size, prefill backlog, batch slots used, KV-cache usage and
accelerator memory, as the servers' own scrapes report them (a signal a server does not report is left
out), and headroom's own **predicted-TTFT** signal: what the learned model predicts a reference request
(``reference_prompt_tokens``) would wait for its first token on each server now, as a ratio of and a
headroom against ``ttft_slo_ms``. Without a model (warm-up) the predicted signals are left out rather
than guessed.

The series (:class:`SignalExporter`), for any metrics adapter:

- ``headroom_predicted_ttft_slo_ratio``, ``headroom_predicted_ttft_headroom_ms`` and
  ``headroom_accelerator_memory_used_ratio`` — one series per ready server, labelled ``server`` and,
  when the router knows the pod (from the server spec, which pod discovery fills), ``namespace`` and
  ``pod`` of the *model-server* pod the value describes. An adapter then serves them as ``Pods``
  metrics of those pods — GMP's as ``prometheus.googleapis.com|headroom_predicted_ttft_slo_ratio|gauge``
  (the router's PodMonitoring leaves its own ``pod`` label off, :func:`autoscale.pipelines.pod_monitoring`),
  prometheus-adapter's through a rule (scrape the router with ``honorLabels``). Without pod identity the
  series carry only ``server``; use an ``External`` metric with ``AverageValue``, whose query sums
  over the pool: ``sum(headroom_predicted_ttft_slo_ratio)`` (the HPA divides the sum by the target).
- ``headroom_autoscale_pool_signal{signal, stat}`` — ``mean`` and ``total`` of every signal (the
  servers' own included) over the ready servers, for ``Object`` / ``External`` targets. No ``max``:
  a max over servers falls as servers are added, and an HPA on it scales down under load.
- ``headroom_autoscale_pool_servers{state}`` — ``reporting`` (ready) and ``total`` servers.

A server that disappears from an update has its series removed, so stale values never linger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from headroom.contract.scaling_signals import (
    ReportedMetrics,
    Signal,
    SignalContext,
    pool_signals,
    pool_signals_by_server,
)
from headroom.contract.server_metrics import ServerMetrics
from headroom.metric_table import MetricTable, gauge
from headroom.router.errors import PredictionUnavailable
from headroom.router.framework.candidate_features import candidate_features
from headroom.router.framework.roles import Candidate, LatencyPredictor, Request, ServerSnapshot
from headroom.router.state.pool import PoolState

GIB = 2**30
POD_LABELS = ("server", "namespace", "pod")


class SignalMetrics(MetricTable):
    """The scaling signals' gauges, declared once."""

    ttft_slo_ratio = gauge(Signal.TTFT_SLO_RATIO.value, "Predicted TTFT of a reference request over the TTFT SLO, "
                           "per model-server pod.", *POD_LABELS)
    ttft_headroom_ms = gauge(Signal.TTFT_HEADROOM_MS.value, "TTFT SLO minus a reference request's predicted TTFT "
                             "(ms), per model-server pod.", *POD_LABELS)
    accelerator_memory = gauge(Signal.ACCELERATOR_MEMORY.value, "Accelerator memory in use over capacity, per "
                               "model-server pod.", *POD_LABELS)
    pool_signal = gauge("headroom_autoscale_pool_signal", "Autoscaling signal over the pool's ready servers.",
                        "signal", "stat")
    pool_servers = gauge("headroom_autoscale_pool_servers", "Servers in the pool, by state.", "state")


class SignalExporter:
    """Holds the gauges (:class:`SignalMetrics`) in ``registry`` and refreshes them from server snapshots."""

    def __init__(self, registry: CollectorRegistry, context: SignalContext = SignalContext()) -> None:
        self.context = context
        self.metrics = metrics = SignalMetrics(registry)
        self._per_pod = {Signal.TTFT_SLO_RATIO: metrics.ttft_slo_ratio, Signal.TTFT_HEADROOM_MS:
                         metrics.ttft_headroom_ms, Signal.ACCELERATOR_MEMORY: metrics.accelerator_memory}
        self._pool, self._servers = metrics.pool_signal, metrics.pool_servers
        self._labels: set[tuple[Signal, tuple[str, str, str]]] = set()

    def update(self, servers: Sequence[ReportedMetrics], pods: Mapping[str, tuple[str, str]] = {}) -> None:
        """Refresh every series; ``pods`` maps a server id to its pod's ``(namespace, pod)`` when known."""
        labels = set()
        by_server = pool_signals_by_server(servers, self.context)
        for sid, values in by_server.items():
            identity = (sid, *pods.get(sid, ("", "")))
            for signal in self._per_pod:
                if signal in values:
                    self._per_pod[signal].labels(*identity).set(values[signal])
                    labels.add((signal, identity))
        for signal, identity in self._labels - labels:
            self._per_pod[signal].remove(*identity)
        self._labels = labels
        self._pool.clear()
        for signal, pooled in pool_signals(servers, self.context, by_server).items():
            self._pool.labels(signal.value, "mean").set(pooled.mean)
            self._pool.labels(signal.value, "total").set(pooled.total)
        self._servers.labels("total").set(len(servers))
        self._servers.labels("reporting").set(sum(1 for s in servers if s.ready))


@dataclass(frozen=True, slots=True)
class ServerSignals:
    """One server's scrape in the shape :mod:`contract.scaling_signals` reads."""

    server_id: str
    metrics: ServerMetrics
    ready: bool


class _Known:
    """Predicted TTFTs computed for this refresh."""

    def __init__(self, ttft_ms: dict[str, float]):
        self.ttft_ms = ttft_ms

    def predict_ttft_ms(self, servers: Sequence[ReportedMetrics]) -> dict[str, float]:
        return self.ttft_ms


class RouterSignals:
    def __init__(self, registry: CollectorRegistry, predictor: LatencyPredictor | None, *,
                 ttft_slo_ms: float | None, reference_prompt_tokens: int, memory_capacity_gib: float):
        self.exporter = SignalExporter(registry)
        self.predictor = predictor
        self.ttft_slo_ms = ttft_slo_ms
        self.reference = Request(request_id="autoscale-reference", prompt_tokens=reference_prompt_tokens)
        self.memory_capacity_bytes = int(memory_capacity_gib * GIB)

    def read(self, pool: PoolState, now: float) -> tuple[list[ServerSignals], Sequence[ServerSnapshot],
                                                         dict[str, tuple[str, str]]]:
        """The pool's state for a refresh, and each server's pod; call it where the pool is updated."""
        snapshots = pool.snapshots(self.reference, now)
        healthy = {s.server_id for s in snapshots}
        servers = [ServerSignals(sid, m, sid in healthy)
                   for sid, m in ((sid, pool.scrapes[sid].metrics) for sid in pool.servers) if m is not None]
        pods = {sid: (spec.namespace, spec.pod) for sid, spec in pool.servers.items() if spec.pod}
        return servers, snapshots, pods

    def publish(self, servers: list[ServerSignals], snapshots: Sequence[ServerSnapshot],
                pods: dict[str, tuple[str, str]] | None = None) -> None:
        """Recompute every gauge (blocking: the predictor may be remote, so run it off the event loop)."""
        self.exporter.context = SignalContext(memory_capacity_bytes=self.memory_capacity_bytes,
                                              ttft_slo_ms=self.ttft_slo_ms,
                                              predictor=_Known(self._predicted_ttft(snapshots)))
        self.exporter.update(servers, pods or {})

    def _predicted_ttft(self, snapshots: Sequence[ServerSnapshot]) -> dict[str, float]:
        if self.predictor is None or self.ttft_slo_ms is None:
            return {}
        by_pool: dict[str, list[ServerSnapshot]] = {}
        for snapshot in snapshots:
            by_pool.setdefault(snapshot.pool_key, []).append(snapshot)
        predicted = {}
        for pool_key, group in by_pool.items():
            try:
                batch = self.predictor.predict(pool_key, candidate_features(self.reference,
                                                                            [Candidate(s) for s in group]))
            except PredictionUnavailable:
                continue
            ttft = batch.values.get("ttft")
            if ttft is None:
                continue
            predicted.update({s.server_id: float(v) for s, v, ok in zip(group, ttft, batch.ok) if ok})
        return predicted
