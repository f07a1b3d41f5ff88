"""Per-server and pool signals from the simulator's snapshots, and their Prometheus export per model-server pod."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from headroom.autoscale.servers import ModelServer
from headroom.contract.scaling_signals import (
    Signal,
    SignalContext,
    per_pod_milli,
    pool_signals,
    server_signals,
)
from headroom.contract.server_metrics import ServerMetrics
from headroom.router.app.autoscale_signals import SignalExporter
from headroom.sim.records import MetricsSnapshot

GIB = 2**30


def vllm_metrics(waiting: int, running: int, kv: float = 0.1) -> ServerMetrics:
    """A simulated server's metrics: every series filled, JetStream's from the same queue and batch."""
    return ServerMetrics(num_waiting=waiting, num_running=running, kv_cache_usage=kv, prefix_cache_queries=0,
                         prefix_cache_hits=0, prefill_backlog=waiting, slots_used=running / 256,
                         memory_used_bytes=72 * GIB)


def snapshot(server_id: str, waiting: int, running: int, kv: float, ready: bool = True) -> MetricsSnapshot:
    return MetricsSnapshot(server_id, "h100", "default", 0.0, vllm_metrics(waiting, running, kv), ready=ready)


class QueueDrain:
    """A stand-in predictor for these tests: 40 ms per request queued ahead, this one included."""

    def predict_ttft_ms(self, servers):
        return {s.server_id: (s.metrics.num_waiting + 1) * 40.0 for s in servers}


POOL = [snapshot("s0", 12, 128, 0.5), snapshot("s1", 8, 64, 0.25), snapshot("s2", 0, 0, 0.0, ready=False)]
CONTEXT = SignalContext(memory_capacity_bytes=80 * GIB, ttft_slo_ms=500.0, predictor=QueueDrain(),
                        weights_bytes=16 * GIB, kv_capacity_bytes=40 * GIB)


@pytest.mark.parametrize("signal, expected", [
    (Signal.QUEUE_SIZE, 12.0),
    (Signal.BATCH_SIZE, 128.0),
    (Signal.PREFILL_BACKLOG, 12.0),
    (Signal.SLOTS_USED, 0.5),
    (Signal.KV_CACHE_USAGE, 0.5),
    (Signal.GPU_CACHE_USAGE, 0.5),
    (Signal.HBM_USED_BYTES, 36.0 * GIB),
    (Signal.ACCELERATOR_MEMORY, 0.9),
    (Signal.TTFT_SLO_RATIO, 13 * 40.0 / 500.0),
    (Signal.TTFT_HEADROOM_MS, 500.0 - 13 * 40.0),
], ids=lambda v: v.name if isinstance(v, Signal) else None)
def test_server_signals(signal: Signal, expected: float) -> None:
    assert server_signals(POOL[0], CONTEXT)[signal] == pytest.approx(expected)


def test_loading_server_reports_nothing() -> None:
    assert server_signals(POOL[2], CONTEXT) == {}


def test_ttft_signals_need_a_predictor_and_an_slo() -> None:
    assert Signal.TTFT_SLO_RATIO not in server_signals(POOL[0])


def test_pool_signal_averages_over_reporting_servers() -> None:
    queue = pool_signals(POOL, CONTEXT)[Signal.QUEUE_SIZE]
    assert (queue.mean, queue.total, queue.reporting, queue.servers) == (10.0, 20.0, 2, 3)


def test_per_pod_milli_truncates_like_an_adapter() -> None:
    assert per_pod_milli(POOL, Signal.KV_CACHE_USAGE) == {"s0": 500, "s1": 250}
    assert per_pod_milli([snapshot("s", 0, 1, 0.4537)], Signal.KV_CACHE_USAGE) == {"s": 453}


@pytest.mark.parametrize("server, exported, absent", [
    (ModelServer("vllm", "0.9"), Signal.GPU_CACHE_USAGE, Signal.KV_CACHE_USAGE),
    (ModelServer("vllm", "0.10"), Signal.KV_CACHE_USAGE, Signal.SLOTS_USED),
    (ModelServer("vllm", "0.11"), Signal.KV_CACHE_USAGE, Signal.GPU_CACHE_USAGE),
    (ModelServer("vllm", "0.12"), Signal.BATCH_SIZE, Signal.GPU_CACHE_USAGE),
    (ModelServer("jetstream"), Signal.SLOTS_USED, Signal.QUEUE_SIZE),
], ids=["vllm-0.9", "vllm-0.10", "vllm-0.11", "vllm-0.12", "jetstream"])
def test_what_each_model_server_exports(server: ModelServer, exported: Signal, absent: Signal) -> None:
    assert server.serves(exported) and not server.serves(absent)
    assert server.serves(Signal.TTFT_SLO_RATIO)  # headroom's router exports it for any pool
    assert set(server.scaling_signals(router_signals=False)) <= set(server.exported)


def test_vllm_0_10_exports_both_kv_cache_names() -> None:
    assert {Signal.KV_CACHE_USAGE, Signal.GPU_CACHE_USAGE} <= set(ModelServer("vllm", "0.10").exported)


def test_exporter_serves_headroom_signals_per_model_server_pod_and_retires_them() -> None:
    registry = CollectorRegistry()
    exporter = SignalExporter(registry, CONTEXT)
    exporter.update(POOL, {"s0": ("llm", "vllm-abc")})
    text = generate_latest(registry).decode()
    assert 'headroom_predicted_ttft_slo_ratio{namespace="llm",pod="vllm-abc",server="s0"} 1.04' in text
    assert 'headroom_predicted_ttft_slo_ratio{namespace="",pod="",server="s1"} 0.72' in text
    assert 'headroom_autoscale_pool_signal{signal="vllm:num_requests_waiting",stat="mean"} 10.0' in text
    assert 'stat="max"' not in text
    assert 'headroom_autoscale_pool_servers{state="reporting"} 2.0' in text
    exporter.update(POOL[1:])
    text = generate_latest(registry).decode()
    assert 'server="s0"' not in text
    assert 'headroom_autoscale_pool_servers{state="total"} 2.0' in text
