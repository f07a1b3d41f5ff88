"""Models trained on log latency: the runtime exponentiates their outputs and checks the declared transform."""

import time

import numpy as np
import xgboost

from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.model_update import TRANSFORM_ATTRIBUTE, encode_update, make_update
from headroom.predictor.runtime import ApplyOutcome, ModelRuntime
from tests.keys import TEST_KEY, TRUST
from tests.predictor.models import candidate_rows, latency_ms, train

ROWS = candidate_rows(50, seed=3)


def log_model(target: str = "ttft", objective: str = "mean", seed: int = 0,
              declared: str | None = "log") -> xgboost.Booster:
    """A booster fitted on log milliseconds, carrying the transform attribute (unless ``declared`` is None)."""
    x = candidate_rows(600, seed)
    params = {"max_depth": 4, "eta": 0.1, "nthread": 1, "tree_method": "hist", "seed": seed,
              "objective": "reg:squarederror"}
    if objective == "quantile":
        params.update(objective="reg:quantileerror", quantile_alpha=0.9)
    booster = xgboost.train(params, xgboost.DMatrix(x, label=np.log(latency_ms(x, target, seed))), 20)
    if declared is not None:
        booster.set_attr(**{TRANSFORM_ATTRIBUTE: declared})
    return booster


def message(booster: xgboost.Booster, version: int, transform: str, objective: str = "mean",
            target: str = "ttft") -> bytes:
    return TEST_KEY.sign(encode_update(make_update(
        model=bytes(booster.save_raw("ubj")), version=version, pool_key="pool-a", target=target,
        objective=objective, quantile=0.9 if objective == "quantile" else None, feature_schema=FEATURE_SCHEMA,
        model_format="ubj", created_at=time.time(), output_transform=transform)))


def test_log_models_are_exponentiated_beside_identity_models():
    runtime = ModelRuntime(trust=TRUST)
    mean, p90, tpot = log_model(), log_model(objective="quantile", seed=1), train("tpot", seed=4)
    assert runtime.apply(message(mean, 1, "log")).outcome is ApplyOutcome.APPLIED
    assert runtime.apply(message(p90, 1, "log", objective="quantile")).outcome is ApplyOutcome.APPLIED
    assert runtime.apply(message(tpot, 1, "identity", target="tpot")).outcome is ApplyOutcome.APPLIED
    prediction = runtime.predict("pool-a", ROWS)
    np.testing.assert_allclose(prediction.get("ttft"), np.exp(mean.inplace_predict(ROWS)), rtol=1e-5)
    np.testing.assert_allclose(prediction.get("ttft", "quantile"), np.exp(p90.inplace_predict(ROWS)), rtol=1e-5)
    np.testing.assert_allclose(prediction.get("tpot"), tpot.inplace_predict(ROWS), rtol=1e-6)
    assert (prediction.get("ttft", "quantile") > prediction.get("ttft")).mean() > 0.8


def test_a_log_model_with_negative_raw_outputs_passes_the_probe():
    shifted = log_model(seed=2)
    shifted.set_param({"base_score": -5.0})  # raw outputs below zero: sub-millisecond, still positive
    runtime = ModelRuntime(trust=TRUST)
    assert runtime.apply(message(shifted, 1, "log")).outcome is ApplyOutcome.APPLIED
    assert (runtime.predict("pool-a", ROWS).get("ttft") > 0).all()


def test_a_transform_the_model_was_not_trained_with_is_rejected():
    runtime = ModelRuntime(trust=TRUST)
    runtime.apply(message(log_model(), 1, "log"))
    before = runtime.predict("pool-a", ROWS).get("ttft")
    unlabelled = runtime.apply(message(log_model(seed=3, declared=None), 2, "log"))
    mislabelled = runtime.apply(message(log_model(seed=3), 3, "identity"))
    assert (unlabelled.outcome, unlabelled.reason) == (ApplyOutcome.REJECTED, "transform")
    assert (mislabelled.outcome, mislabelled.reason) == (ApplyOutcome.REJECTED, "transform")
    assert "trained with 'log'" in mislabelled.detail
    assert runtime.rejected["transform"] == 2 and runtime.version("pool-a", "ttft", "mean") == 1
    np.testing.assert_array_equal(runtime.predict("pool-a", ROWS).get("ttft"), before)
