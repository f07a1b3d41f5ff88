"""Per-server and pool signals from the simulator's snapshots, and their Prometheus export."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from headroom.autoscale.exporter import SignalExporter
from headroom.autoscale.signals import (
    QueueDrainTtft,
    Signal,
    SignalContext,
    per_pod_milli,
    pool_signals,
    server_signals,
)
from headroom.sim.records import ServerSnapshot

GIB = 2**30


def snapshot(server_id: str, waiting: int, running: int, kv: float, ready: bool = True) -> ServerSnapshot:
    return ServerSnapshot(server_id=server_id, server_type="h100", pool_key="default", time_s=0.0,
                          num_waiting=waiting, num_running=running, kv_cache_usage=kv, prefix_cache_queries=0,
                          prefix_cache_hits=0, prefill_backlog=waiting, slots_used=running / 256,
                          memory_used_bytes=72 * GIB, ready=ready)


POOL = [snapshot("s0", 12, 128, 0.5), snapshot("s1", 8, 64, 0.25), snapshot("s2", 0, 0, 0.0, ready=False)]
CONTEXT = SignalContext(memory_capacity_bytes=80 * GIB, ttft_slo_ms=500.0, predictor=QueueDrainTtft(prefill_ms=40.0))


@pytest.mark.parametrize("signal, expected", [
    (Signal.QUEUE_SIZE, 12.0),
    (Signal.PREFILL_BACKLOG, 12.0),
    (Signal.SLOTS_USED, 0.5),
    (Signal.KV_CACHE_USAGE, 0.5),
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
    assert (queue.mean, queue.total, queue.maximum, queue.reporting, queue.servers) == (10.0, 20.0, 12.0, 2, 3)


def test_per_pod_milli_truncates_like_an_adapter() -> None:
    assert per_pod_milli(POOL, Signal.KV_CACHE_USAGE) == {"s0": 500, "s1": 250}
    assert per_pod_milli([snapshot("s", 0, 1, 0.4537)], Signal.KV_CACHE_USAGE) == {"s": 453}


def test_exporter_serves_and_retires_series() -> None:
    registry = CollectorRegistry()
    exporter = SignalExporter(registry, CONTEXT)
    exporter.update(POOL)
    text = generate_latest(registry).decode()
    assert 'headroom_autoscale_signal{server="s0",signal="vllm:num_requests_waiting"} 12.0' in text
    assert 'headroom_autoscale_pool_signal{signal="vllm:num_requests_waiting",stat="mean"} 10.0' in text
    assert 'headroom_autoscale_pool_servers{state="reporting"} 2.0' in text
    exporter.update(POOL[1:])
    text = generate_latest(registry).decode()
    assert 'server="s0"' not in text
    assert 'headroom_autoscale_pool_servers{state="total"} 2.0' in text
