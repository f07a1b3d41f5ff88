"""The router corrects each server's predictions by how far its completions departed from them."""

import math

import pytest

from headroom.contract.server_metrics import ServerMetrics
from headroom.feedback.latency_corrections import EARLY_TPOT_TOKENS
from headroom.router.control.metering import Completion
from headroom.router.control.metrics import RouterMetrics
from headroom.router.control.service import RouterService
from headroom.router.control.telemetry_sink import MemoryTelemetry
from headroom.router.framework.engine import Engine
from headroom.router.framework.pipeline import DEFAULT_PIPELINE, load_pipeline
from headroom.router.state.pool import PoolState
from headroom.router.state.servers import ServerSpec
from tests.router.routercases import TablePredictor, req, server


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def service(predictor, scheduling=None):
    clock = Clock()
    pool = PoolState((ServerSpec("a", "127.0.0.1:1"), ServerSpec("b", "127.0.0.1:2")))
    for sid in ("a", "b"):
        pool.scraped(sid, ServerMetrics(0.1, 0, 1), now=clock.now)
    return RouterService(Engine(load_pipeline(scheduling)), pool, MemoryTelemetry(), RouterMetrics(),
                         predictor=predictor, monotonic=clock, wall=clock), clock


def serve(router, clock, n, slowdown, request_id="r"):
    """``n`` requests, each completed right away, taking ``slowdown`` × the model's TTFT wherever they went."""
    chosen = []
    for i in range(n):
        dispatch = router.pick(req(request_id=f"{request_id}{i}", stream=True))
        model = dispatch.decision.chosen.prediction.model_ms()
        factor = slowdown.get(dispatch.server.server_id, 1.0)
        router.complete(dispatch, Completion(e2e_ms=500.0, output_tokens=10, ttft_ms=model["ttft"] * factor,
                                             tpot_ms=model["tpot"]))
        clock.now += 0.01
        chosen.append(dispatch.server.server_id)
    return chosen


def test_a_server_that_turns_slower_is_priced_slower_after_a_few_completions_and_avoided():
    router, clock = service(TablePredictor(base=100.0))
    serve(router, clock, 20, {})
    sent = serve(router, clock, 6, {"a": 2.0, "b": 2.0})  # both slow: nothing to choose
    assert set(sent) == {"a", "b"}
    serve(router, clock, 20, {"a": 2.0})  # only a stays slow
    later = serve(router, clock, 20, {"a": 2.0})
    assert later.count("b") == 20
    (a, b) = router.pool.snapshots(req(), clock.now)
    # b's last completions all met the model; a's ring holds the slow ones it served before being avoided
    assert math.exp(b.latency_correction[0]) == pytest.approx(1.0) and math.exp(a.latency_correction[0]) > 1.05


def test_the_decision_uses_the_corrected_prediction_and_the_telemetry_carries_the_models():
    router, clock = service(TablePredictor(base=100.0))
    serve(router, clock, 10, {"a": 3.0, "b": 3.0})
    dispatch = router.pick(req(request_id="x", stream=True))
    prediction = dispatch.decision.chosen.prediction
    assert prediction.ttft_ms > 200.0 and prediction.model_ms()["ttft"] == pytest.approx(100.0)
    record = router.complete(dispatch, Completion(e2e_ms=500.0, output_tokens=10, ttft_ms=300.0, tpot_ms=20.0))
    assert record.predicted_ttft_ms == pytest.approx(100.0)  # the model's residual is what drift detection watches


def test_a_new_model_version_fades_the_correction():
    predictor = TablePredictor(base=100.0, version=3)
    router, clock = service(predictor)
    serve(router, clock, 20, {"a": 4.0, "b": 4.0})
    before = math.exp(router.pool.snapshots(req(), clock.now)[0].latency_correction[0])
    predictor.version = 4
    router.pick(req(request_id="new", stream=True))
    after = math.exp(router.pool.snapshots(req(), clock.now)[0].latency_correction[0])
    assert after == pytest.approx(math.sqrt(before))


def test_it_can_be_switched_off():
    scheduling = {**DEFAULT_PIPELINE, "plugins": [
        {**p, "params": {"latencyCorrection": False}} if p["type"] == "predicted-latency-producer" else p
        for p in DEFAULT_PIPELINE["plugins"]]}
    router, clock = service(TablePredictor(base=100.0), scheduling)
    serve(router, clock, 20, {"a": 3.0, "b": 3.0})
    prediction = router.pick(req(request_id="x", stream=True)).decision.chosen.prediction
    assert prediction.ttft_ms == pytest.approx(100.0) and prediction.model_ms()["ttft"] == pytest.approx(100.0)


def test_a_callers_candidates_get_the_corrections_learned_for_them():
    router, clock = service(TablePredictor(base=100.0))
    serve(router, clock, 10, {"a": 3.0, "b": 3.0})
    table = router.pool.with_corrections(list(router.pool.snapshots(req(), clock.now)), clock.now)
    assert math.exp(table.latency_correction[0, 0]) > 2.0
    unknown = router.pool.with_corrections([server("elsewhere")], clock.now)
    assert unknown.latency_correction.tolist() == [[0.0], [0.0], [0.0]]


def ttft_factor(router, clock, server_id):
    (snapshot,) = [s for s in router.pool.snapshots(req(), clock.now) if s.server_id == server_id]
    return math.exp(snapshot.latency_correction[0])


def tpot_factor(router, clock, server_id):
    (snapshot,) = [s for s in router.pool.snapshots(req(), clock.now) if s.server_id == server_id]
    return math.exp(snapshot.latency_correction[1])


def test_a_streams_first_token_teaches_its_ttft_at_once_and_its_end_does_not_count_it_again():
    router, clock = service(TablePredictor(base=100.0))
    dispatch = router.pick(req(request_id="s", stream=True))
    sid, model = dispatch.server.server_id, dispatch.decision.chosen.prediction.model_ms()
    clock.now += 2 * model["ttft"] / 1000.0  # twice the model's TTFT
    router.streamed(dispatch, clock.now)
    once = ttft_factor(router, clock, sid)
    assert once == pytest.approx(math.sqrt(2.0))  # one ratio of 2, shrunk by half while it is the only one
    router.streamed(dispatch, clock.now + 0.05)  # later tokens teach nothing more
    router.complete(dispatch, Completion(e2e_ms=5000.0, output_tokens=50, ttft_ms=2 * model["ttft"],
                                         tpot_ms=model["tpot"]))
    assert ttft_factor(router, clock, sid) == pytest.approx(once)


def test_a_caller_reporting_the_whole_stream_at_its_end_still_teaches_its_ttft():
    router, clock = service(TablePredictor(base=100.0))
    serve(router, clock, 1, {"a": 2.0, "b": 2.0})  # completed without a token relayed, as the Pick API reports
    assert max(ttft_factor(router, clock, sid) for sid in ("a", "b")) == pytest.approx(math.sqrt(2.0), rel=1e-3)


def test_an_untrusted_callers_tokens_teach_nothing():
    router, clock = service(TablePredictor(base=100.0))
    dispatch = router.pick(req(request_id="s", stream=True))
    for _ in range(3 * EARLY_TPOT_TOKENS):
        clock.now += 1.0
        router.streamed(dispatch, clock.now, trusted=False)
    router.complete(dispatch, Completion(e2e_ms=2000.0, output_tokens=5, ttft_ms=1000.0, tpot_ms=10.0),
                    trusted=False)
    sid = dispatch.server.server_id
    assert ttft_factor(router, clock, sid) == tpot_factor(router, clock, sid) == pytest.approx(1.0)


def test_a_streams_first_tokens_teach_its_tpot_while_it_runs_and_once():
    router, clock = service(TablePredictor(base=100.0))
    dispatch = router.pick(req(request_id="s", stream=True))
    sid, model = dispatch.server.server_id, dispatch.decision.chosen.prediction.model_ms()
    clock.now += model["ttft"] / 1000.0
    router.streamed(dispatch, clock.now)  # the first token

    def tokens(n, tpot_ms):
        for _ in range(n):
            clock.now += tpot_ms / 1000.0
            router.streamed(dispatch, clock.now)

    tokens(EARLY_TPOT_TOKENS - 1, 2 * model["tpot"])  # twice the model's TPOT
    assert tpot_factor(router, clock, sid) == pytest.approx(1.0)  # not timed yet
    tokens(1, 2 * model["tpot"])
    once = tpot_factor(router, clock, sid)
    assert once == pytest.approx(math.sqrt(2.0))  # one ratio of 2, shrunk by half while it is the only one
    tokens(3 * EARLY_TPOT_TOKENS, model["tpot"] / 100.0)  # later tokens, however fast, teach nothing: nor the end
    router.complete(dispatch, Completion(e2e_ms=9000.0, output_tokens=4 * EARLY_TPOT_TOKENS + 1,
                                         ttft_ms=model["ttft"], tpot_ms=model["tpot"] / 4))
    assert tpot_factor(router, clock, sid) == pytest.approx(once, rel=1e-3)  # faded by a few ms only


def test_a_short_stream_teaches_its_tpot_at_its_end():
    router, clock = service(TablePredictor(base=100.0))
    dispatch = router.pick(req(request_id="s", stream=True))
    sid, model = dispatch.server.server_id, dispatch.decision.chosen.prediction.model_ms()
    for _ in range(EARLY_TPOT_TOKENS // 2):
        clock.now += 0.01
        router.streamed(dispatch, clock.now)
    router.complete(dispatch, Completion(e2e_ms=900.0, output_tokens=EARLY_TPOT_TOKENS // 2, ttft_ms=model["ttft"],
                                         tpot_ms=2 * model["tpot"]))
    assert tpot_factor(router, clock, sid) == pytest.approx(math.sqrt(2.0))


def test_a_server_whose_streams_wait_past_their_first_tokens_is_priced_that_late_while_they_wait():
    router, clock = service(TablePredictor(base=100.0))
    waiting = [router.pick(req(request_id=f"s{i}", stream=True), watched=True) for i in range(4)]
    sent = [d.server.server_id for d in waiting]
    stalled = max(("a", "b"), key=sent.count)  # two streams or more
    other = ({"a", "b"} - {stalled}).pop()
    on_stalled = [d for d in waiting if d.server.server_id == stalled]
    for dispatch in waiting:
        if dispatch.server.server_id == other:
            router.streamed(dispatch, clock.now + 0.05)  # the other one answers
    clock.now += 0.4  # the stalled server's streams waited 4x the model's 100 ms
    assert ttft_factor(router, clock, stalled) == pytest.approx(4.0, rel=0.01)
    assert ttft_factor(router, clock, other) <= 1.0  # it answered (if it had any) in half the model's time
    assert router.pick(req(request_id="next", stream=True), watched=True).server.server_id == other
    factors = {(sid, target): factor for sid, target, factor in router.pool.latency_corrections(clock.now)}
    assert factors[stalled, "ttft"] == pytest.approx(4.0, rel=0.01)  # as the metrics show it
    for dispatch in on_stalled:
        router.streamed(dispatch, clock.now)  # their first tokens: what they teach replaces what they said
    assert 1.0 < ttft_factor(router, clock, stalled) < 4.0


def test_one_late_stream_and_streams_not_watched_say_nothing_of_their_server():
    router, clock = service(TablePredictor(base=100.0))
    alone = router.pick(req(request_id="alone", stream=True), watched=True)
    clock.now += 1.0
    assert ttft_factor(router, clock, alone.server.server_id) == pytest.approx(1.0)  # one late stream alone
    router.complete(alone, Completion(e2e_ms=1.0, output_tokens=0), trusted=False)
    for i in range(4):  # as the Pick API's: the router never sees their first tokens
        router.pick(req(request_id=f"p{i}", stream=True))
    clock.now += 1.0
    assert ttft_factor(router, clock, "a") == ttft_factor(router, clock, "b") == pytest.approx(1.0)
