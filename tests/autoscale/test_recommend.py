"""The recommendation search on short synthetic traces: what it searches, what it picks, and that the
written files replay to the very figures it reported."""

from __future__ import annotations

from dataclasses import replace

import kubernetes_validate
import pytest
import yaml

from headroom.autoscale.advice import scaling_advice
from headroom.autoscale.bundle import autoscaler_file, bundle
from headroom.autoscale.closed_loop import LoopSettings, run_closed_loop
from headroom.autoscale.documents import load_autoscaler
from headroom.autoscale.manifest import spec_to_dict
from headroom.autoscale.pipelines import Pipeline, Workload
from headroom.autoscale.recommend import (
    KUBERNETES_DEFAULT,
    Evaluation,
    Goal,
    HpaCandidate,
    Slo,
    _bisect,
    behaviors,
    make_autoscaler,
    recommend,
    scaling_exercised,
)
from headroom.autoscale.servers import ModelServer
from headroom.autoscale.traps import find_traps
from headroom.contract.scaling_signals import Signal
from headroom.sim.request import SimRequest

SETTINGS = LoopSettings(load_delay_s=20.0)


def burst_trace() -> list[SimRequest]:
    """60 s at 3 req/s (one server carries it), then 120 s at 40 req/s (about four servers' worth)."""
    requests = [SimRequest(f"a{i}", i / 3.0, 2000, 200) for i in range(180)]
    requests += [SimRequest(f"b{i}", 60.0 + i / 40.0, 2000, 200) for i in range(120 * 40)]
    return requests


@pytest.fixture(scope="module")
def vllm_recommendation():
    return recommend(burst_trace(), Goal(Slo(ttft_p99_ms=2000.0), 1, 6, router_signals=False), SETTINGS)


def test_recommendation_is_the_cheapest_passing_run_on_vllm_metrics(vllm_recommendation) -> None:
    result = vllm_recommendation
    assert {e.candidate.signal for e in result.evaluations} == {Signal.QUEUE_SIZE, Signal.BATCH_SIZE,
                                                                 Signal.KV_CACHE_USAGE}
    assert result.exercised and result.best is not None and result.best.meets
    passing = [e for e in result.evaluations if e.meets]
    assert result.best.replica_hours <= min(e.replica_hours for e in passing) * 1.01
    assert result.best.candidate.spec.behavior is not None
    assert result.warm_replicas == result.settings.initial_replicas >= 1


@pytest.mark.parametrize("pipeline", list(Pipeline), ids=lambda p: p.value)
def test_written_files_replay_to_the_reported_figures(vllm_recommendation, pipeline: Pipeline, tmp_path) -> None:
    """The invariant: recommend → write → read back → simulate with the same settings = the same figures."""
    best = vllm_recommendation.best
    goal = Goal(Slo(2000.0), 1, 6, pipeline, Workload("vllm", "llm"), router_signals=False)
    autoscaler = make_autoscaler(best.candidate.signal, best.candidate.target,
                                 best.candidate.spec.behavior, goal)
    for name, text in bundle(autoscaler, best.candidate.signal, pipeline, goal.workload).items():
        (tmp_path / name).write_text(text)
    read_back = load_autoscaler((tmp_path / autoscaler_file(pipeline)).read_text())
    assert read_back.spec == autoscaler.spec
    assert not [t for t in find_traps(read_back, pipeline=pipeline) if t.code == "pipeline-name"]
    assert read_back.binding(read_back.spec.metrics[0]) == autoscaler.binding(autoscaler.spec.metrics[0])
    replay = run_closed_loop(read_back, burst_trace(), vllm_recommendation.settings)
    direct = run_closed_loop(autoscaler, burst_trace(), vllm_recommendation.settings)
    assert (replay.replica_seconds, replay.ttft_ms, replay.syncs) == (direct.replica_seconds, direct.ttft_ms,
                                                                       direct.syncs)
    if pipeline is Pipeline.GMP:  # the search itself ran in this form
        assert (replay.replica_hours, replay.ttft_quantile(0.99), replay.ttft_attainment(2000.0)) == (
            best.replica_hours, best.ttft_p99_ms, best.attainment)


def test_keda_candidates_are_evaluated_as_the_external_metric_keda_creates() -> None:
    goal = Goal(Slo(2000.0), 1, 6, Pipeline.KEDA, Workload("vllm", "llm"), router_signals=False)
    autoscaler = make_autoscaler(Signal.QUEUE_SIZE, 5.0, KUBERNETES_DEFAULT, goal)
    metric = autoscaler.spec.metrics[0]
    assert (metric.source.value, metric.name, metric.selector) == ("External", "s0-prometheus",
                                                                   {"scaledobject.keda.sh/name": "vllm"})
    assert autoscaler.queries["s0-prometheus"].text == 'sum(vllm:num_requests_waiting{namespace="llm",pod=~"vllm-.*"})'
    pods = run_closed_loop(make_autoscaler(Signal.QUEUE_SIZE, 5.0, KUBERNETES_DEFAULT, Goal(Slo(2000.0), 1, 6)),
                           burst_trace(), SETTINGS)
    external = run_closed_loop(autoscaler, burst_trace(), SETTINGS)
    assert pods.syncs != external.syncs  # loading pods count as missing for Pods metrics, not for the sum


def test_jetstream_pool_searches_what_jetstream_exports() -> None:
    settings = LoopSettings(model_server=ModelServer("jetstream"), load_delay_s=20.0)
    result = recommend(burst_trace(), Goal(Slo(2000.0), 1, 6, router_signals=False), settings, refinements=0)
    assert {e.candidate.signal for e in result.evaluations} == {Signal.PREFILL_BACKLOG, Signal.SLOTS_USED,
                                                                 Signal.HBM_USED_BYTES}
    hbm = next(e for e in result.evaluations if e.candidate.signal is Signal.HBM_USED_BYTES)
    assert hbm.candidate.spec.metrics[0].name == "kubernetes.io|container|accelerator|memory_used"
    assert hbm.candidate.target_text.endswith("Gi")


def test_router_signal_is_searched_with_the_learned_model() -> None:
    settings = LoopSettings(load_delay_s=20.0)
    result = recommend(burst_trace(), Goal(Slo(2000.0), 1, 6), settings, refinements=0)
    assert result.settings.ttft_slo_ms == 2000.0
    ratio = [e for e in result.evaluations if e.candidate.signal is Signal.TTFT_SLO_RATIO]
    assert ratio and any(e.rescales for e in ratio)


def test_every_written_hpa_passes_the_kubernetes_schema(vllm_recommendation) -> None:
    for evaluation in vllm_recommendation.evaluations:
        kubernetes_validate.validate(spec_to_dict(evaluation.candidate.spec), kubernetes_validate.latest_version(),
                                     strict=True)


def test_tolerance_candidates_only_where_the_cluster_honours_them() -> None:
    assert "scale-up-tolerance-0.05" not in behaviors(45.0, None)
    assert "scale-up-tolerance-0.05" not in behaviors(45.0, "1.34")
    assert "scale-up-tolerance-0.05" in behaviors(45.0, "1.35")


def test_a_trace_one_server_carries_is_reported_not_recommended() -> None:
    quiet = [SimRequest(f"q{i}", i / 2.0, 800, 80) for i in range(700)]  # 350 s at 2 req/s
    result = recommend(quiet, Goal(Slo(2000.0), 1, 6, router_signals=False), SETTINGS, refinements=0)
    assert not result.exercised and result.best is None
    advice = scaling_advice(quiet, SETTINGS, 1.0, 6)
    assert advice.suggested_speedup > 1.0 and "--speedup" in advice.message


def test_a_replay_too_short_for_the_hpa_says_so() -> None:
    short = [SimRequest(f"s{i}", i / 50.0, 800, 80) for i in range(1000)]  # 20 s
    assert "too short" in scaling_advice(short, SETTINGS, 20.0, 6).message


def _evaluation(target: float, meets: bool, rescales: int = 1, cost: float = 1.0) -> Evaluation:
    goal = Goal(Slo(1000.0), 1, 4)
    candidate = HpaCandidate(Signal.SLOTS_USED, target, "kubernetes-default",
                          make_autoscaler(Signal.SLOTS_USED, target, None, goal))
    return Evaluation(candidate, cost, 100.0, 10.0, 1.0 if meets else 0.5, rescales, meets, result=None)


@pytest.mark.parametrize("outcomes, expected", [
    ({0.2: True, 0.8: False}, 0.4),
    ({0.2: True, 0.4: True, 0.8: False}, 0.57),
    ({0.2: False, 0.8: False}, None),
    ({0.2: True, 0.8: True}, None),
], ids=["between-pass-and-fail", "from-the-highest-pass", "nothing-passes", "everything-passes"])
def test_bisection_targets_the_gap_below_the_first_failure(outcomes: dict[float, bool], expected) -> None:
    assert _bisect(Signal.SLOTS_USED, [_evaluation(t, ok) for t, ok in outcomes.items()]) == expected


@pytest.mark.parametrize("runs, exercised", [
    ([(0, 1.0), (0, 1.0)], False),
    ([(2, 1.0), (1, 1.005)], False),
    ([(0, 1.0), (3, 1.4)], False),
    ([(2, 1.0), (0, 1.4)], True),
], ids=["nothing-rescaled", "spread-below-noise", "winner-never-rescaled", "exercised"])
def test_scaling_exercised(runs, exercised: bool) -> None:
    evaluations = [_evaluation(0.2 + i / 10, True, rescales, cost) for i, (rescales, cost) in enumerate(runs)]
    cheapest = min(evaluations, key=lambda e: e.replica_hours)
    assert scaling_exercised(evaluations, cheapest) is exercised


def test_written_keda_scaled_object_is_what_keda_documents(tmp_path) -> None:
    goal = Goal(Slo(1000.0), 2, 9, Pipeline.KEDA, Workload("vllm", "llm"))
    files = bundle(make_autoscaler(Signal.QUEUE_SIZE, 4.5, KUBERNETES_DEFAULT, goal), Signal.QUEUE_SIZE,
                   Pipeline.KEDA, goal.workload)
    scaled, auth = yaml.safe_load_all(files["scaledobject.yaml"])
    trigger = scaled["spec"]["triggers"][0]
    assert (scaled["kind"], trigger["type"], trigger["metadata"]["threshold"]) == ("ScaledObject", "prometheus", "4.5")
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    assert auth["spec"]["podIdentity"]["provider"] == "gcp"
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (2, 9)
    assert "podmonitoring.yaml" in files


def test_the_written_autoscaler_carries_the_state_its_figures_start_from(vllm_recommendation, tmp_path) -> None:
    """Replayed from the written file alone (no --initial-replicas) the figures are the reported ones; the file
    says how many replicas they start from, and what applying it to minReplicas costs is measured too."""
    result = vllm_recommendation
    best, warm = result.best, result.warm_replicas
    assert warm > 1 and best.candidate.spec.initial_replicas == warm  # the burst needs more than one at the start
    written = bundle(best.candidate.autoscaler, best.candidate.signal, Pipeline.GMP, Workload())["hpa.yaml"]
    assert yaml.safe_load(written)["metadata"]["annotations"] == {"autoscaling.headroom.dev/initial-replicas": str(warm)}
    unprimed = replace(result.settings, initial_replicas=None)  # what `simulate --hpa hpa.yaml` runs with
    replay = run_closed_loop(load_autoscaler(written), burst_trace(), unprimed)
    assert (replay.replica_hours, replay.ttft_quantile(0.99), replay.ttft_attainment(2000.0)) == (
        best.replica_hours, best.ttft_p99_ms, best.attainment)
    cold = run_closed_loop(load_autoscaler(written), burst_trace(), replace(unprimed, initial_replicas=1))
    assert (cold.ttft_attainment(2000.0), cold.ttft_quantile(0.99)) == (result.cold.attainment,
                                                                       result.cold.ttft_p99_ms)
    assert result.cold.attainment < best.attainment  # applied to one replica, the first burst is missed
    assert "slow-load" not in {t.code for t in result.traps}  # measured in the figures, not advice against them


def test_a_trace_the_minimum_pool_carries_is_answered_without_a_search() -> None:
    quiet = [SimRequest(f"q{i}", i / 2.0, 800, 80) for i in range(700)]
    result = recommend(quiet, Goal(Slo(2000.0), 1, 6, router_signals=False), SETTINGS)
    assert result.evaluations == () and not result.exercised
    assert result.fixed is not None and result.fixed.replicas == 1 and result.fixed.meets


def test_when_even_the_largest_pool_misses_the_slo_no_search_is_run() -> None:
    result = recommend(burst_trace(), Goal(Slo(50.0), 1, 2, router_signals=False), SETTINGS)
    assert result.evaluations == () and result.best is None
    assert result.ceiling is not None and result.ceiling.replicas == 2 and not result.ceiling.meets


def test_the_ranking_table_never_cuts_a_signal_name(vllm_recommendation) -> None:
    from rich.console import Console

    from headroom.autoscale.cli_runs import ranking_table

    console = Console(width=80, record=True)
    console.print(ranking_table(vllm_recommendation, SETTINGS))
    text = console.export_text()
    assert "vllm:num_requests_waiting" in text and "vllm:num_requests_running" in text and "…" not in text


def test_a_scaled_object_still_asking_the_example_project_is_flagged() -> None:
    goal = Goal(Slo(1000.0), 2, 9, Pipeline.KEDA, Workload("vllm", "llm"))
    files = bundle(make_autoscaler(Signal.QUEUE_SIZE, 4.5, KUBERNETES_DEFAULT, goal), Signal.QUEUE_SIZE,
                   Pipeline.KEDA, goal.workload)
    traps = find_traps(load_autoscaler(files["scaledobject.yaml"]))
    assert [t.code for t in traps if t.code == "placeholder"] == ["placeholder"]
    mine = bundle(make_autoscaler(Signal.QUEUE_SIZE, 4.5, KUBERNETES_DEFAULT, goal), Signal.QUEUE_SIZE,
                  Pipeline.KEDA, replace(goal.workload, prometheus_url="http://prometheus.monitoring:9090"))
    assert "placeholder" not in {t.code for t in find_traps(load_autoscaler(mine["scaledobject.yaml"]))}
