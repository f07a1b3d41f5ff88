import dataclasses

import numpy as np
import pytest

from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.model_update import encode_update, load_booster, make_update
from headroom.predictor.runtime import ApplyOutcome, ModelRuntime
from headroom.trainer.calibration import conformal_shift, fit_calibrated_quantile, newest_split, shifted
from headroom.trainer.evaluation import score
from headroom.trainer.fit import fit, model_bytes, predict
from headroom.trainer.params import TrainParams
from tests.keys import TEST_KEY, TRUST
from tests.trainer.synthetic import samples_of, synthetic_records

P90 = TrainParams(objective="quantile", quantile=0.9, n_trees=60)


@pytest.mark.parametrize(("residuals", "quantile", "expected"), [
    pytest.param([3.0, 1.0, 2.0, 4.0], 0.5, 3.0, id="ceil-of-n-plus-one"),
    pytest.param(list(range(1, 10)), 0.9, 9.0, id="capped-at-the-largest"),
    pytest.param([-0.2, -0.1], 0.1, -0.2, id="negative-shift"),
])
def test_conformal_shift(residuals, quantile, expected):
    assert conformal_shift(np.array(residuals), quantile) == expected


def test_newest_split_takes_the_newest_rows_by_time():
    samples = samples_of(synthetic_records(400, seed=3), "ttft")
    older, newer = newest_split(samples, 0.25)
    assert len(older) + len(newer) == len(samples) and len(newer) == round(0.25 * len(samples))
    assert older.times.max() <= newer.times.min()
    with pytest.raises(ValueError, match="calibration fraction"):
        newest_split(samples, 1.0)


def test_shift_moves_every_output_and_survives_the_wire_and_the_predictor():
    samples = samples_of(synthetic_records(1500, seed=4), "ttft")
    booster = fit(samples, P90)
    features = samples.features()
    before = predict(booster, features)
    moved = load_booster(model_bytes(shifted(booster, np.log(1.5))))
    np.testing.assert_allclose(predict(moved, features), before * 1.5, rtol=1e-4)
    runtime = ModelRuntime(trust=TRUST)
    result = runtime.apply(TEST_KEY.sign(encode_update(make_update(
        model=model_bytes(moved), version=1, pool_key="pool-a", target="ttft", objective="quantile", quantile=0.9,
        feature_schema=FEATURE_SCHEMA, model_format="ubj", created_at=1.0, output_transform="log"))))
    assert result.outcome is ApplyOutcome.APPLIED, result.detail
    np.testing.assert_allclose(runtime.predict("pool-a", features[:64]).get("ttft", "quantile"),
                               predict(moved, features[:64]), rtol=1e-4)


def test_calibration_restores_coverage_when_latency_drifts():
    steady = synthetic_records(1500, seed=6)
    slower = synthetic_records(600, seed=7, slowdown=1.15, start_ts=steady[-1].completion_ts + 1.0)
    future = synthetic_records(1000, seed=8, slowdown=1.15, start_ts=slower[-1].completion_ts + 1.0)
    train, test = samples_of(steady + slower, "ttft"), samples_of(future, "ttft")
    plain = score(test.values, predict(fit(train, P90), test.features()), 0.9).coverage
    calibrated = fit_calibrated_quantile(train, P90, 0.25)
    covered = score(test.values, predict(calibrated.booster, test.features()), 0.9).coverage
    assert calibrated.rows == round(0.25 * len(train)) and calibrated.shift > 0
    assert plain < 0.85 and 0.85 <= covered <= 0.97


def test_too_few_newest_rows_leave_the_model_as_fitted():
    samples = samples_of(synthetic_records(60, seed=9), "ttft")
    calibrated = fit_calibrated_quantile(samples, P90, 0.25)
    assert (calibrated.rows, calibrated.shift) == (0, 0.0)
    np.testing.assert_array_equal(predict(calibrated.booster, samples.features()),
                                  predict(fit(samples, P90), samples.features()))


def test_only_quantile_models_are_calibrated():
    samples = samples_of(synthetic_records(200, seed=10), "ttft")
    with pytest.raises(ValueError, match="only quantile models"):
        fit_calibrated_quantile(samples, dataclasses.replace(P90, objective="mean"), 0.25)
