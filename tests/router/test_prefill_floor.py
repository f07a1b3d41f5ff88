"""A queue deeper than the models know is priced by the server's prefill pace, learned from its streams."""

import copy
import math

import numpy as np
import pytest

from headroom.feedback.latency_corrections import PACE_MIN_WORK
from headroom.router.control.metering import Completion
from headroom.router.framework.pipeline import DEFAULT_PIPELINE
from tests.router.routercases import TablePredictor, req
from tests.router.test_latency_correction import service

PACE_MS = 0.5  # ms per token of prefill work, in these cases


def stream_through(router, clock, n, prompt_tokens=4000):
    """``n`` streams, each completed with a first token after ``PACE_MS`` per token of the work ahead of it."""
    served = []
    for i in range(n):
        dispatch = router.pick(req(request_id=f"s{len(served)}-{i}-{clock.now}", prompt_tokens=prompt_tokens,
                                   stream=True))
        work = dispatch.server.inflight_prefill_tokens + prompt_tokens * (1.0 - dispatch.server.prefix_match)
        router.complete(dispatch, Completion(e2e_ms=5000.0, output_tokens=10, ttft_ms=PACE_MS * work, tpot_ms=20.0))
        clock.now += 0.01
        served.append(dispatch.server.server_id)
    return served


def test_the_router_learns_each_servers_prefill_pace_from_its_streams():
    router, clock = service(TablePredictor(base=100.0, per_waiting=0.0))
    served = stream_through(router, clock, 20)
    for snapshot in router.pool.snapshots(req(), clock.now):
        if served.count(snapshot.server_id) >= 3:
            assert snapshot.prefill_ms_per_token == pytest.approx(PACE_MS, rel=1e-3)  # faded for 0.2 s at most
        else:
            assert snapshot.prefill_ms_per_token == 0.0


def test_a_router_without_a_predictor_learns_no_pace():
    router, clock = service(None)  # heuristic decisions only: nothing to floor
    stream_through(router, clock, 20)
    assert [s.prefill_ms_per_token for s in router.pool.snapshots(req(), clock.now)] == [0.0, 0.0]
    assert not router.pool.corrections.log_factors(np.arange(2), clock.now).any()


def test_small_prefills_teach_no_pace():
    router, clock = service(TablePredictor(base=100.0, per_waiting=0.0))
    stream_through(router, clock, 20, prompt_tokens=PACE_MIN_WORK // 2)
    assert [s.prefill_ms_per_token for s in router.pool.snapshots(req(), clock.now)] == [0.0, 0.0]


def test_a_deep_queue_is_priced_at_its_pace_and_avoided_while_the_model_prices_it_as_empty():
    router, clock = service(TablePredictor(base=100.0, per_waiting=0.0))  # blind to any queue
    served = stream_through(router, clock, 20)
    slow = max(set(served), key=served.count)  # a server with a pace
    for i in range(10):  # 40,000 prompt tokens queued there, none streaming yet
        router.pool.dispatched(req(request_id=f"q{i}", prompt_tokens=4000, stream=True), slow, clock.now)
    dispatch = router.pick(req(request_id="next", prompt_tokens=4000, stream=True))
    assert dispatch.server.server_id != slow
    (candidate,) = [c for c in dispatch.decision.candidates if c.server.server_id == slow]
    assert candidate.prediction.ttft_ms == pytest.approx(PACE_MS * 44_000, rel=1e-3)
    assert candidate.prediction.model_ms()["ttft"] == pytest.approx(100.0)  # what the corrections learn against


def test_the_floor_never_lowers_a_prediction():
    router, clock = service(TablePredictor(base=100_000.0, per_waiting=0.0))  # slower than any pace says
    stream_through(router, clock, 20)
    dispatch = router.pick(req(request_id="next", prompt_tokens=4000, stream=True))
    for c in dispatch.decision.candidates:  # above the floor: corrected by the server's correction alone
        assert c.prediction.ttft_ms > PACE_MS * 4000
        assert c.prediction.correction == pytest.approx(c.server.latency_correction)
        assert c.prediction.ttft_ms == pytest.approx(100_000.0 * math.exp(c.server.latency_correction[0]))


def test_without_the_floor_a_deep_queue_is_priced_as_the_model_says():
    scheduling = copy.deepcopy(DEFAULT_PIPELINE)
    for plugin in scheduling["plugins"]:
        if plugin["type"] == "predicted-latency-producer":
            plugin["params"] = {**plugin.get("params", {}), "prefillFloor": False}
    router, clock = service(TablePredictor(base=100.0, per_waiting=0.0), scheduling)
    served = stream_through(router, clock, 20)
    slow = max(set(served), key=served.count)
    for i in range(10):
        router.pool.dispatched(req(request_id=f"q{i}", prompt_tokens=4000, stream=True), slow, clock.now)
    dispatch = router.pick(req(request_id="next", prompt_tokens=4000, stream=True))
    (candidate,) = [c for c in dispatch.decision.candidates if c.server.server_id == slow]
    assert candidate.prediction.correction == pytest.approx(candidate.server.latency_correction)
    assert candidate.prediction.ttft_ms < PACE_MS * 44_000 / 10


def test_a_forged_first_token_moves_no_pace_until_most_of_the_ring_says_so():
    router, clock = service(TablePredictor(base=100.0, per_waiting=0.0))
    corrections = router.pool.corrections
    for _ in range(8):
        corrections.observe_prefill("a", PACE_MS * 2000, 2000, clock.now)
    for _ in range(2):
        corrections.observe_prefill("a", math.inf, 2000, clock.now)  # not finite: left out
        corrections.observe_prefill("a", 3.6e6, 2000, clock.now)  # an hour
    pace = corrections.prefill_pace_of(["a"], clock.now)
    np.testing.assert_allclose(pace, [PACE_MS])
