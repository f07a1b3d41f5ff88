"""The routing-quality benchmark's policy set: every baseline named in it, each routing a small load."""

import pytest

from headroom.benchmarks.routing_policies import BASELINES, LLM_D, LLM_D_ARGMAX, headroom
from headroom.router.framework.pipeline import load_pipeline
from headroom.sim.pool import run, uniform_pool
from headroom.sim.synthetic import synthetic_load
from tests.router.routercases import TablePredictor

LOAD = synthetic_load("code:burst_factor=8", 150, seed=2)


def test_the_baseline_set():
    assert set(BASELINES) == {"round-robin", "random", "least-queue", "prefix-least-queue", "least-kv", "composite",
                              "llm-d", "llm-d argmax"}
    assert {name for name, (_, deterministic) in BASELINES.items() if not deterministic} == {
        "random", "llm-d", "llm-d argmax"}


def test_llm_d_stack_is_prefix_queue_kv_weighted_3_2_2_with_either_picker():
    for config, picker in ((LLM_D, "WeightedRandomPicker"), (LLM_D_ARGMAX, "MaxScorePicker")):
        stack = load_pipeline(config).heuristic
        assert [(s.name, w) for s, w in stack.scorers] == [("prefix", 3.0), ("queue", 2.0), ("kv", 2.0)]
        assert type(stack.picker).__name__ == picker
    assert load_pipeline(LLM_D).heuristic.picker.params.sharpness == 1.0  # probability ∝ score, as deployed


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_every_baseline_routes_every_request_and_deterministic_ones_repeat(name):
    make, deterministic = BASELINES[name]
    runs = [run(LOAD, uniform_pool(4), make(seed), seed=seed) for seed in (0, 1)]
    assert all(len(r.outcomes) == len(LOAD) and not r.dropped for r in runs)
    assert len({o.server_id for o in runs[0].outcomes}) > 1  # it spreads the load
    if deterministic:  # so it is run once: another seed gives the same latencies
        assert sorted(o.ttft_ms for o in runs[0].outcomes) == sorted(o.ttft_ms for o in runs[1].outcomes)


def test_headroom_overlays_reach_plugins_by_name_or_type():
    requests = LOAD[:40]
    first = run(requests, uniform_pool(4), headroom(TablePredictor(), (500.0, 50.0), seed=1,
                                                      overlays={"predicted-picker": {"tieTolerance": 0.1}}))
    assert len(first.outcomes) == len(requests)
    with pytest.raises(Exception, match="plugin 'affinity': parameter 'affinityThreshold'"):
        headroom(TablePredictor(), None, overlays={"prefix-cache-affinity-filter": {"affinityThreshold": 2.0}})
