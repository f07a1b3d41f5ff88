"""Prometheus series of headroom's own autoscaling signals, one per model-server pod, for any metrics adapter.

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

from prometheus_client import CollectorRegistry, Gauge

from headroom.autoscale.signals import ReportedMetrics, Signal, SignalContext, pool_signals, pool_signals_by_server

PER_POD = (Signal.TTFT_SLO_RATIO, Signal.TTFT_HEADROOM_MS, Signal.ACCELERATOR_MEMORY)
POD_LABELS = ("server", "namespace", "pod")
_HELP = {Signal.TTFT_SLO_RATIO: "Predicted TTFT of a reference request over the TTFT SLO, per model-server pod.",
         Signal.TTFT_HEADROOM_MS: "TTFT SLO minus a reference request's predicted TTFT (ms), per model-server pod.",
         Signal.ACCELERATOR_MEMORY: "Accelerator memory in use over capacity, per model-server pod."}


class SignalExporter:
    """Holds the gauges in ``registry`` and refreshes them from server snapshots."""

    def __init__(self, registry: CollectorRegistry, context: SignalContext = SignalContext()) -> None:
        self.context = context
        self._per_pod = {s: Gauge(s.value, _HELP[s], list(POD_LABELS), registry=registry) for s in PER_POD}
        self._pool = Gauge("headroom_autoscale_pool_signal", "Autoscaling signal over the pool's ready servers.",
                           ["signal", "stat"], registry=registry)
        self._servers = Gauge("headroom_autoscale_pool_servers", "Servers in the pool, by state.",
                              ["state"], registry=registry)
        self._labels: set[tuple[Signal, tuple[str, str, str]]] = set()

    def update(self, servers: Sequence[ReportedMetrics], pods: Mapping[str, tuple[str, str]] = {}) -> None:
        """Refresh every series; ``pods`` maps a server id to its pod's ``(namespace, pod)`` when known."""
        labels = set()
        by_server = pool_signals_by_server(servers, self.context)
        for sid, values in by_server.items():
            identity = (sid, *pods.get(sid, ("", "")))
            for signal in PER_POD:
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
