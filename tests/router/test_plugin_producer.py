import random

import numpy as np
import pytest

from headroom.contract.features import FEATURE_NAMES
from headroom.router.errors import ConfigError
from headroom.router.framework.plugins.predicted_latency_producer import build
from headroom.router.framework.roles import Candidate, Context, PredictionBatch
from headroom.tpot_ratios import TpotRatios
from tests.router.routercases import TablePredictor, ctx, req, server


def candidates(*snaps):
    return [Candidate(server=s) for s in snaps]


def test_predicts_every_candidate_in_one_call_per_pool():
    predictor = TablePredictor(base=100, per_waiting=50)
    out = build("p").produce(req(prompt_tokens=700, max_tokens=64),
                             candidates(server("a", num_waiting=0), server("b", num_waiting=2),
                                        server("c", pool_key="h100")), ctx(predictor=predictor))
    assert [c.prediction.ttft_ms for c in out] == [100.0, 200.0, 100.0]
    assert sorted(pool for pool, _ in predictor.calls) == ["default", "h100"]
    features = predictor.calls[0][1]
    assert features.shape == (2, len(FEATURE_NAMES))
    assert features[0, FEATURE_NAMES.index("prompt_tokens")] == 700
    assert features[1, FEATURE_NAMES.index("max_tokens")] == 64
    assert all(c.prediction.versions == {"ttft": 3, "tpot": 3} for c in out)


CASES = [
    pytest.param(dict(slo_ttft_ms=300.0), {}, 200.0, None, id="ttft-headroom"),
    pytest.param(dict(slo_ttft_ms=300.0, slo_tpot_ms=50.0), {}, 200.0, None, id="tpot-ignored-when-not-streaming"),
    pytest.param(dict(slo_ttft_ms=300.0, slo_tpot_ms=50.0, stream=True), {}, 200.0, 30.0, id="tpot-headroom-streaming"),
    pytest.param(dict(slo_ttft_ms=300.0, slo_tpot_ms=50.0, stream=True), {"running_tpot_slos_ms": (40.0, 25.0)},
                 200.0, 5.0, id="tightened-by-running-slos"),
    pytest.param(dict(slo_ttft_ms=300.0, stream=True), {"running_tpot_slos_ms": (40.0,)}, 200.0, 20.0,
                 id="running-slo-applies-without-own-tpot-slo"),
    pytest.param(dict(), {}, None, None, id="no-slo-no-headroom"),
]


@pytest.mark.parametrize("fields, state, ttft_headroom, tpot_headroom", CASES)
def test_headroom(fields, state, ttft_headroom, tpot_headroom):
    (out,) = build("p").produce(req(**fields), candidates(server("a", **state)), ctx(predictor=TablePredictor()))
    assert out.ttft_headroom_ms == ttft_headroom
    assert out.tpot_headroom_ms == tpot_headroom


def test_slo_buffer_factor_tightens_tpot():
    (out,) = build("p", {"sloBufferFactor": 0.5}).produce(
        req(slo_tpot_ms=60.0, stream=True), candidates(server("a")), ctx(predictor=TablePredictor(tpot=20.0)))
    assert out.tpot_headroom_ms == 10.0


def test_degrades_per_candidate():
    predictor = TablePredictor(unavailable={"broken": "warm-up"}, failing_rows={1})
    out = build("p").produce(req(), candidates(server("a"), server("b"), server("c", pool_key="broken"),
                                               server("d", metrics_age_s=60.0)), ctx(predictor=predictor))
    assert [c.fallback_reason for c in out] == [None, "prediction-failed", "warm-up", "stale-metrics"]
    assert [c.predicted for c in out] == [True, False, False, False]


def test_non_finite_prediction_is_a_failure():
    class NanPredictor(TablePredictor):
        def predict(self, pool_key, features):
            batch = super().predict(pool_key, features)
            batch.values["ttft"][0] = np.nan
            return batch
    (out,) = build("p").produce(req(), candidates(server("a")), ctx(predictor=NanPredictor()))
    assert out.fallback_reason == "prediction-failed"


def test_no_predictor():
    (out,) = build("p").produce(req(), candidates(server("a")), ctx())
    assert out.fallback_reason == "predictor-unavailable" and out.prediction is None


def test_batch_without_a_target_fails_every_row():
    class TtftOnly(TablePredictor):
        def predict(self, pool_key, features):
            batch = super().predict(pool_key, features)
            return PredictionBatch(values={"ttft": batch.values["ttft"]}, ok=batch.ok, versions=batch.versions)
    out = build("p").produce(req(), candidates(server("a"), server("b")), ctx(predictor=TtftOnly()))
    assert [c.fallback_reason for c in out] == ["prediction-failed"] * 2 and not any(c.predicted for c in out)


def bimodal_ratios(pool_key="default"):
    """Streams predicted at 40 ms: 60 of 100 got 20 ms, 40 got 52 (0.9 quantile of got / predicted: 1.3)."""
    ratios = TpotRatios()
    for got in [20.0] * 60 + [52.0] * 40:
        ratios.add(pool_key, predicted_ms=40.0, got_ms=got)
    return ratios


def produce_tpot(params, ratios, tpot=40.0, pool_key="default"):
    context = Context(rng=random.Random(0), predictor=TablePredictor(tpot=tpot), tpot_ratios=ratios)
    (out,) = build("p", params).produce(req(slo_tpot_ms=50.0, stream=True), candidates(server("a", pool_key=pool_key)),
                                        context)
    return out


def test_tpot_verdict_is_calibrated_by_what_streams_got():
    calibrated = {"tpotQuantile": 0.9}
    assert produce_tpot({}, bimodal_ratios()).meets_slo is True  # the mean, 40 ms, is under 50
    late = produce_tpot(calibrated, bimodal_ratios())
    assert late.meets_slo is False and late.tpot_headroom_ms == pytest.approx(50.0 / 1.3 - 40.0)
    assert produce_tpot(calibrated, bimodal_ratios(), tpot=30.0).meets_slo is True  # 30 x 1.3 is in time
    assert produce_tpot(calibrated, bimodal_ratios("other")).tpot_headroom_ms == 10.0  # none of its own pool
    assert produce_tpot(calibrated, None).tpot_headroom_ms == 10.0  # no record: uncalibrated
    assert produce_tpot({**calibrated, "tpotLeast": 101}, bimodal_ratios()).tpot_headroom_ms == 10.0  # too few


def test_tpot_factor_is_bounded():
    accurate = TpotRatios()
    for got in [30.0] * 100:  # predictions too pessimistic: never loosened below the floor
        accurate.add("default", predicted_ms=40.0, got_ms=got)
    assert produce_tpot({"tpotQuantile": 0.9}, accurate).tpot_headroom_ms == 10.0
    capped = produce_tpot({"tpotQuantile": 0.9, "tpotFactorCap": 1.1}, bimodal_ratios())
    assert capped.tpot_headroom_ms == pytest.approx(50.0 / 1.1 - 40.0)


def test_tpot_calibration_parameters_are_checked():
    with pytest.raises(ConfigError, match="tpotLeast"):
        build("p", {"tpotWindow": 10, "tpotLeast": 20})
    with pytest.raises(ConfigError, match="tpotFactorCap"):
        build("p", {"tpotFactorFloor": 1.5, "tpotFactorCap": 1.2})
