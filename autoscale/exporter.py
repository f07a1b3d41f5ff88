"""Prometheus gauges of the autoscaling signals, for the Prometheus adapter or the Stackdriver adapter.

Series (``signal`` is the :class:`~autoscale.signals.Signal` metric name):

- ``headroom_autoscale_signal{signal, server}`` — per ready server; an adapter rule turns it into a
  per-pod custom metric for a ``Pods`` / ``AverageValue`` HPA target;
- ``headroom_autoscale_pool_signal{signal, stat}`` — ``stat`` is ``mean``, ``total`` or ``max`` over
  the ready servers, for ``Object`` / ``External`` targets (prefer ``mean`` or ``total``: a ``max``
  hides load spread over many servers and can scale down under load);
- ``headroom_autoscale_pool_servers{state}`` — ``reporting`` (ready) and ``total`` servers.

A server that disappears from an update has its series removed, so stale values never linger.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Gauge

from headroom.autoscale.signals import ServerMetrics, SignalContext, pool_signals, server_signals


class SignalExporter:
    """Holds the gauges in ``registry`` and refreshes them from server snapshots."""

    def __init__(self, registry: CollectorRegistry, context: SignalContext = SignalContext()) -> None:
        self.context = context
        self._server = Gauge("headroom_autoscale_signal", "Autoscaling signal reported by one ready server.",
                             ["signal", "server"], registry=registry)
        self._pool = Gauge("headroom_autoscale_pool_signal", "Autoscaling signal over the pool's ready servers.",
                           ["signal", "stat"], registry=registry)
        self._servers = Gauge("headroom_autoscale_pool_servers", "Servers in the pool, by state.",
                              ["state"], registry=registry)
        self._labels: set[tuple[str, str]] = set()

    def update(self, servers: Sequence[ServerMetrics]) -> None:
        labels = set()
        for server in servers:
            for signal, value in server_signals(server, self.context).items():
                self._server.labels(signal.value, server.server_id).set(value)
                labels.add((signal.value, server.server_id))
        for stale in self._labels - labels:
            self._server.remove(*stale)
        self._labels = labels
        self._pool.clear()
        for signal, pooled in pool_signals(servers, self.context).items():
            self._pool.labels(signal.value, "mean").set(pooled.mean)
            self._pool.labels(signal.value, "total").set(pooled.total)
            self._pool.labels(signal.value, "max").set(pooled.maximum)
        self._servers.labels("total").set(len(servers))
        self._servers.labels("reporting").set(sum(1 for s in servers if s.ready))
