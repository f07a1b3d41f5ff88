"""Closed loop: the HPA simulator drives the pool simulator on synthetic rate steps."""

from __future__ import annotations

from dataclasses import replace

import pytest

from headroom.autoscale.closed_loop import LoopSettings, _Loop, run_closed_loop
from headroom.autoscale.documents import Autoscaler
from headroom.autoscale.errors import SpecError
from headroom.autoscale.learned import TrainingPlan, learn_ttft_model
from headroom.autoscale.pipelines import Binding
from headroom.autoscale.pods import group_pods
from headroom.autoscale.promql import parse_query
from headroom.autoscale.servers import ModelServer
from headroom.autoscale.spec import (
    Behavior,
    HpaSpec,
    MetricSpec,
    MetricTarget,
    PolicyType,
    ScalingPolicy,
    ScalingRules,
    SourceType,
    TargetType,
)
from headroom.contract.scaling_signals import Signal, pool_signals_by_server
from headroom.sim.records import MetricsSnapshot
from headroom.sim.request import SimRequest
from tests.autoscale.test_signals import vllm_metrics

QUEUE = MetricSpec(SourceType.PODS, "vllm:num_requests_waiting", MetricTarget(TargetType.AVERAGE_VALUE, 5000))
SETTINGS = LoopSettings(load_delay_s=30.0)


def steps(*phases: tuple[float, float]) -> list[SimRequest]:
    """Evenly spaced requests: ``(duration s, rate req/s)`` phases one after the other."""
    requests, start = [], 0.0
    for duration, rate in phases:
        count = int(duration * rate)
        requests += [SimRequest(f"r{len(requests) + i}", start + i / rate, 1000, 100) for i in range(count)]
        start += duration
    return requests


def one_per_minute_up(down_window: int = 300) -> Behavior:
    return Behavior(scale_up=ScalingRules((ScalingPolicy(PolicyType.PODS, 1, 60),), stabilization_window_seconds=0),
                    scale_down=ScalingRules((ScalingPolicy(PolicyType.PERCENT, 100, 15),),
                                            stabilization_window_seconds=down_window))


def test_rate_step_up_scales_at_the_policy_pace() -> None:
    spec = HpaSpec(max_replicas=6, metrics=(QUEUE,), behavior=one_per_minute_up())
    result = run_closed_loop(spec, steps((120.0, 4.0), (300.0, 80.0)), SETTINGS)
    ups = [s for s in result.syncs if s.desired > s.current]
    # The step lands at 120 s; the pipeline scrapes every 15 s, the HPA syncs every 15 s: the first sync
    # after a scrape that saw the queue scales up, then the Pods 1/60 s policy adds one pod a minute.
    assert ups[0].at <= 120.0 + 15.0 + 15.0
    assert all(s.metric_desired > s.desired for s in ups)
    assert [(s.at - ups[0].at, s.desired) for s in ups] == [(0.0, 2), (60.0, 3), (120.0, 4), (180.0, 5)]


def test_rate_step_down_waits_for_the_stabilization_window() -> None:
    window = 120
    spec = HpaSpec(max_replicas=6, min_replicas=1, metrics=(QUEUE,), behavior=one_per_minute_up(window))
    settings = LoopSettings(load_delay_s=30.0, initial_replicas=4)
    result = run_closed_loop(spec, steps((120.0, 40.0), (400.0, 2.0)), settings)
    first_low = next(s.at for s in result.syncs if s.metric_desired is not None and s.metric_desired < s.current)
    downs = [s for s in result.syncs if s.desired < s.current]
    assert downs, "the pool never scaled down"
    assert downs[0].at >= first_low + window - 15.0


def test_loading_server_is_a_missing_pod() -> None:
    spec = HpaSpec(max_replicas=4, metrics=(QUEUE,))
    loop = _Loop(spec, {QUEUE.label: Binding(Signal.QUEUE_SIZE)}, SETTINGS, ["server-0"], None, 60.0, None)
    loop.created["server-1"] = 10.0

    def snap(sid: str, ready: bool) -> MetricsSnapshot:
        return MetricsSnapshot(sid, "h100", "default", 20.0, vllm_metrics(9, 3), ready=ready)

    snapshots = [snap("server-0", True), snap("server-1", False)]
    metrics = loop._metrics(snapshots, pool_signals_by_server(snapshots), 20.0)
    pods = loop._pods({"server-0": "ready", "server-1": "loading"})
    samples = metrics.pod_samples(QUEUE, 20.0)
    assert set(samples) == {"server-0"}
    groups = group_pods(pods, samples, None, 20.0)
    assert groups.missing == {"server-1"} and groups.ready_count == 1


@pytest.mark.parametrize("query, expected", [
    ("sum(vllm:num_requests_waiting)", 21_000), ("avg(vllm:num_requests_waiting)", 10_500),
    ("max(vllm:num_requests_waiting)", 12_000), ("vllm:num_requests_waiting", None),
], ids=["sum", "avg", "max", "bare-series-several-servers"])
def test_external_metric_is_its_query_over_the_ready_servers(query: str, expected) -> None:
    metric = MetricSpec(SourceType.EXTERNAL, "s0-prometheus", MetricTarget(TargetType.AVERAGE_VALUE, 5000))
    autoscaler = Autoscaler(HpaSpec(max_replicas=4, metrics=(metric,)), queries={"s0-prometheus": parse_query(query)})
    loop = _Loop(autoscaler.spec, {metric.label: autoscaler.binding(metric)}, SETTINGS, ["a", "b"], None, 60.0, None)
    snapshots = [MetricsSnapshot(sid, "h100", "default", 0.0, vllm_metrics(waiting, 1), ready=ready)
                 for sid, waiting, ready in (("a", 12, True), ("b", 9, True), ("c", 40, False))]
    metrics = loop._metrics(snapshots, pool_signals_by_server(snapshots), 0.0)
    assert metrics.external.get(metric.label) == (None if expected is None else [expected])


def test_a_metric_the_model_server_does_not_export_is_refused() -> None:
    slots = MetricSpec(SourceType.PODS, "prometheus.googleapis.com|jetstream_slots_used_percentage|gauge",
                       MetricTarget(TargetType.AVERAGE_VALUE, 800))
    with pytest.raises(SpecError, match="vLLM 0.11 pool does not export jetstream_slots_used_percentage"):
        run_closed_loop(HpaSpec(max_replicas=3, metrics=(slots,)), steps((10.0, 1.0)), SETTINGS)
    jetstream = LoopSettings(model_server=ModelServer("jetstream"), load_delay_s=30.0)
    assert run_closed_loop(HpaSpec(max_replicas=3, metrics=(slots,)), steps((10.0, 1.0)), jetstream).requests == 10


def test_old_vllm_exports_the_old_kv_cache_name() -> None:
    kv = MetricSpec(SourceType.PODS, "vllm:kv_cache_usage_perc", MetricTarget(TargetType.AVERAGE_VALUE, 800))
    old = LoopSettings(model_server=ModelServer("vllm", "0.9"), load_delay_s=30.0)
    with pytest.raises(SpecError, match="gpu_cache_usage_perc"):
        run_closed_loop(HpaSpec(max_replicas=3, metrics=(kv,)), steps((10.0, 1.0)), old)


def test_initial_replicas_start_the_pool() -> None:
    spec = HpaSpec(max_replicas=6, metrics=(QUEUE,), behavior=one_per_minute_up())
    result = run_closed_loop(spec, steps((30.0, 2.0)), LoopSettings(load_delay_s=30.0, initial_replicas=3))
    assert result.timeline[0].ready == 3 and result.syncs[0].current == 3


def test_predicted_ttft_signal_comes_from_the_learned_model() -> None:
    ratio = MetricSpec(SourceType.PODS, "headroom_predicted_ttft_slo_ratio",
                       MetricTarget(TargetType.AVERAGE_VALUE, 500))
    spec = HpaSpec(max_replicas=6, metrics=(ratio,), behavior=one_per_minute_up())
    trace = steps((60.0, 4.0), (120.0, 80.0))
    with pytest.raises(SpecError, match="needs the router's TTFT SLO"):
        run_closed_loop(spec, trace, SETTINGS)
    settings = replace(SETTINGS, ttft_slo_ms=1000.0, learning=TrainingPlan(requests=1500))
    model = learn_ttft_model(trace, settings.profile, settings.seed, settings.learning)
    result = run_closed_loop(spec, trace, settings, ttft_model=model)
    assert result.rescales and "headroom_predicted_ttft_slo_ratio" in result.timeline[-1].metrics
    assert run_closed_loop(spec, trace, settings).syncs == result.syncs  # learned again: the same model


def test_same_seed_same_timeline() -> None:
    spec = HpaSpec(max_replicas=6, metrics=(QUEUE,), behavior=one_per_minute_up())
    trace = steps((60.0, 4.0), (120.0, 80.0))
    first, second = run_closed_loop(spec, trace, SETTINGS), run_closed_loop(spec, trace, SETTINGS)
    assert first.timeline == second.timeline
    assert first.ttft_ms == second.ttft_ms
    assert first.replica_seconds == second.replica_seconds


def test_cost_counts_loading_servers() -> None:
    spec = HpaSpec(max_replicas=6, metrics=(QUEUE,), behavior=one_per_minute_up())
    result = run_closed_loop(spec, steps((60.0, 4.0), (120.0, 80.0)), SETTINGS)
    booked = sum(SETTINGS.tick_s * (p.ready + p.loading + p.draining) for p in result.timeline)
    assert any(p.loading for p in result.timeline)
    assert result.replica_seconds == pytest.approx(booked)


def test_cpu_metrics_are_refused_with_a_clear_error() -> None:
    spec = HpaSpec(max_replicas=3)  # CPU 80 % by default
    with pytest.raises(SpecError, match="reports no cpu"):
        run_closed_loop(spec, steps((10.0, 1.0)), SETTINGS)
