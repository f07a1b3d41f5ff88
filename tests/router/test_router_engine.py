import pytest

from headroom.router.errors import NoCandidates
from headroom.router.framework.engine import Engine
from headroom.router.framework.pipeline import DEFAULT_PIPELINE, load_pipeline
from tests.router.routercases import TablePredictor, ctx, req, server

NO_EXPLORATION = {**DEFAULT_PIPELINE, "plugins": [
    {**p, "params": {"explorationProbability": 0.0}} if p["type"] == "prefix-cache-affinity-filter" else
    {**p, "params": {"epsilonExploreNeg": 0.0}} if p["type"] == "slo-headroom-tier-filter" else p
    for p in DEFAULT_PIPELINE["plugins"]]}


@pytest.fixture
def engine():
    return Engine(load_pipeline(NO_EXPLORATION))


def test_predicted_profile_picks_fastest(engine):
    servers = [server("a", num_waiting=4), server("b", num_waiting=0), server("c", num_waiting=9)]
    picks = {engine.decide(req(), servers, ctx(seed, TablePredictor())).chosen.server.server_id for seed in range(50)}
    decision = engine.decide(req(), servers, ctx(0, TablePredictor()))
    assert decision.profile == "predicted" and decision.fallback is None
    assert "c" not in picks and "b" in picks  # the slowest scores 0


@pytest.mark.parametrize("predict_all, reason", [
    pytest.param(True, "opted-out", id="predict-all"),
    pytest.param(False, "not-opted-in", id="opt-in-router"),
])
def test_unpredicted_request_takes_heuristic_with_reason(predict_all, reason):
    engine = Engine(load_pipeline({**NO_EXPLORATION, "predictAll": predict_all}))
    decision = engine.decide(req(predict=False), [server("a")], ctx(0, TablePredictor()))
    assert (decision.profile, decision.fallback, decision.heuristic_reason) == ("heuristic", None, reason)
    assert decision.candidates[0].prediction is None


def test_warm_up_falls_back_fully_with_reason(engine):
    predictor = TablePredictor(unavailable={"default": "warm-up"})
    decision = engine.decide(req(), [server("a"), server("b")], ctx(0, predictor))
    assert decision.profile == "heuristic" and decision.heuristic_reason == "warm-up"
    assert (decision.fallback, decision.fallback_reasons) == ("full", ("warm-up",))
    assert decision.chosen is not None


@pytest.mark.parametrize("unavailable, reason", [
    pytest.param({"h100": "warm-up", "a100": "no-model-for-pool"}, "warm-up", id="warm-up-first"),
    pytest.param({"h100": "no-model-for-pool", "a100": "predictor-unavailable"}, "predictor-unavailable",
                 id="unavailable-before-pool"),
    pytest.param({"h100": "something-new", "a100": "no-model-for-pool"}, "no-model-for-pool", id="unknown-last"),
])
def test_a_fully_degraded_request_is_counted_under_one_reason(engine, unavailable, reason):
    servers = [server("a", pool_key="h100"), server("b", pool_key="a100")]
    decision = engine.decide(req(), servers, ctx(0, TablePredictor(unavailable=unavailable)))
    assert decision.heuristic_reason == reason and set(decision.fallback_reasons) == set(unavailable.values())


def test_a_partly_degraded_request_is_no_heuristic_decision(engine):
    decision = engine.decide(req(), [server("a"), server("b")], ctx(0, TablePredictor(failing_rows={1})))
    assert decision.profile == "predicted" and decision.heuristic_reason is None


def test_partial_fallback_scores_unpredicted_with_heuristic(engine):
    predictor = TablePredictor(failing_rows={1})
    servers = [server("a", num_waiting=1, kv_cache_usage=0.9), server("b", num_waiting=0, kv_cache_usage=0.1)]
    decision = engine.decide(req(), servers, ctx(0, predictor))
    assert decision.profile == "predicted"
    assert (decision.fallback, decision.fallback_reasons) == ("partial", ("prediction-failed",))
    scores = {s.candidate.server.server_id: s.score for s in decision.scored}
    # "a" is the only predicted candidate (latency score 1); "b" gets the heuristic mean of kv-free 0.9,
    # queue 1 (the shortest of both) and prefix 0.
    assert scores["a"] == pytest.approx(1.0) and scores["b"] == pytest.approx((0.9 + 1.0 + 0.0) / 3)


def test_an_unpredicted_candidate_with_the_longest_queue_scores_so_among_all(engine):
    """A server without a model that stalls (its queue grows) is not scored as if it were alone."""
    servers = [server("a", num_waiting=0), server("b", num_waiting=1), server("stalled", num_waiting=12)]
    decision = engine.decide(req(), servers, ctx(0, TablePredictor(failing_rows={2})))
    scores = {s.candidate.server.server_id: s.score for s in decision.scored}
    assert decision.fallback == "partial"
    assert scores["stalled"] == pytest.approx((1.0 - 0.0 + 0.0) / 3)  # kv-free 1 (no usage), queue 0, prefix 0
    picks = {engine.decide(req(), servers, ctx(seed, TablePredictor(failing_rows={2}))).chosen.server.server_id
             for seed in range(30)}
    assert "stalled" not in picks


def test_sheddable_rejected_when_nobody_meets_slo(engine):
    servers = [server("a", num_waiting=20, kv_cache_usage=0.5), server("b", num_waiting=30, kv_cache_usage=0.6)]
    decision = engine.decide(req(slo_ttft_ms=200.0, priority=-1), servers, ctx(0, TablePredictor()))
    assert decision.chosen is None and "priority -1" in decision.rejection


def test_sheddable_admitted_in_fallback(engine):
    servers = [server("a", num_waiting=20, kv_cache_usage=0.5)]
    decision = engine.decide(req(slo_ttft_ms=200.0, priority=-1), servers, ctx(0, TablePredictor(unavailable={"default": "unreachable"})))
    assert decision.chosen is not None and decision.fallback == "full"


def test_a_request_late_everywhere_in_a_burst_is_held_where_the_front_can_wait(engine):
    never = Engine(load_pipeline({**NO_EXPLORATION, "plugins": [
        {**p, "params": {**p.get("params", {}), "holdCap": 0}} if p["type"] == "late-concentration-filter" else p
        for p in NO_EXPLORATION["plugins"]]}))
    burst = [server("a", num_waiting=20, inflight_prefill_tokens=900),
             server("b", num_waiting=30, inflight_prefill_tokens=50)]
    late = req(slo_ttft_ms=200.0, holdable=True)
    decision = engine.decide(late, burst, ctx(0, TablePredictor()))
    assert decision.chosen is None and decision.rejection is None and decision.held.for_ms == 1_000.0
    assert "on every one of 2 servers" in decision.held.reason
    for sent in (never.decide(late, burst, ctx(0, TablePredictor())),  # not held: concentrated
                 engine.decide(req(slo_ttft_ms=200.0), burst, ctx(0, TablePredictor())),  # a front that cannot wait
                 engine.decide(req(slo_ttft_ms=200.0, holdable=True, waited_ms=1_000.0), burst, ctx(0, TablePredictor()))):
        assert sent.held is None and sent.chosen.server.server_id == "a"  # (the last at the cap)
    warm_up = engine.decide(late, burst, ctx(0, TablePredictor(unavailable={"default": "warm-up"})))
    assert warm_up.held is None and warm_up.chosen is not None  # without predictions nothing is known to be late


def test_slo_request_goes_to_positive_tier(engine):
    servers = [server("a", num_waiting=0), server("b", num_waiting=10), server("c", num_waiting=2)]
    picks = {engine.decide(req(slo_ttft_ms=300.0), servers, ctx(seed, TablePredictor())).chosen.server.server_id
             for seed in range(40)}
    assert picks <= {"a", "c"} and "a" in picks  # "most" spreads: a has the most headroom (200 ms of 300)


def test_pool_default_slo_schedules_as_if_the_headers_were_sent():
    servers = [server("a", num_waiting=0), server("b", num_waiting=10), server("c", num_waiting=2)]
    defaulted = Engine(load_pipeline({**NO_EXPLORATION, "defaultSLO": {"ttftMs": 300.0}}))
    headers = Engine(load_pipeline(NO_EXPLORATION))
    for seed in range(20):
        plain = defaulted.decide(req(), servers, ctx(seed, TablePredictor()))
        sent = headers.decide(req(slo_ttft_ms=300.0), servers, ctx(seed, TablePredictor()))
        assert plain.chosen.server.server_id == sent.chosen.server.server_id
        assert plain.request.slo_ttft_ms == 300.0 and plain.chosen.ttft_headroom_ms == sent.chosen.ttft_headroom_ms
    shed = defaulted.decide(req(priority=-1), [server("b", num_waiting=10, kv_cache_usage=0.5)], ctx(0, TablePredictor()))
    assert shed.chosen is None  # the default SLO makes a sheddable request sheddable


def test_no_servers(engine):
    with pytest.raises(NoCandidates):
        engine.decide(req(), [], ctx())


@pytest.mark.parametrize("predict_all, opted_in, opted_out, predicted", [
    pytest.param(None, False, False, True, id="default-predicts-every-request"),
    pytest.param(None, False, True, False, id="default-opt-out"),
    pytest.param(None, True, False, True, id="default-opt-in-changes-nothing"),
    pytest.param(False, False, False, False, id="opt-in-router-without-header"),
    pytest.param(False, True, False, True, id="opt-in-router-opted-in"),
    pytest.param(False, True, True, False, id="opt-in-router-out-wins"),
])
def test_wants_prediction(predict_all, opted_in, opted_out, predicted):
    raw = None if predict_all is None else {**DEFAULT_PIPELINE, "predictAll": predict_all}
    assert Engine(load_pipeline(raw)).wants_prediction(opted_in, opted_out) is predicted
