"""The router's autoscaling signals (SPEC §6) on its ``/metrics``, through :class:`autoscale.exporter.SignalExporter`.

Per server and over the pool: queue size, prefill backlog, batch slots used, KV-cache usage and
accelerator memory, as the servers' own scrapes report them (a signal a server does not report is left
out), and headroom's own **predicted-TTFT** signal: what the learned model predicts a reference request
(``reference_prompt_tokens``) would wait for its first token on each server now, as a ratio of and a
headroom against ``ttft_slo_ms``. Without a model (warm-up) the predicted signals are left out rather
than guessed. Each server's own series carry its pod's ``namespace`` and ``pod`` when the server spec
names them, so adapters serve them as per-pod metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from headroom.autoscale.exporter import SignalExporter
from headroom.autoscale.signals import ReportedMetrics, SignalContext
from headroom.router.candidate_features import candidate_features
from headroom.router.errors import PredictionUnavailable
from headroom.router.roles import Candidate, LatencyPredictor, Request, ServerSnapshot
from headroom.router.state.pool import PoolState

GIB = 2**30


@dataclass(frozen=True, slots=True)
class ServerSignals:
    """One server's state in the shape :mod:`autoscale.signals` reads."""

    server_id: str
    num_waiting: int
    num_running: int
    kv_cache_usage: float
    prefill_backlog: int | None
    slots_used: float | None
    memory_used_bytes: int | None
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
        servers = [ServerSignals(sid, m.num_waiting, m.num_running, m.kv_cache_usage, m.prefill_backlog,
                                 m.slots_used, m.memory_used_bytes, sid in healthy)
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
