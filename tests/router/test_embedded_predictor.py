"""The router's adapter over the real in-process model runtime, with real XGBoost models."""

import random

import pytest

from headroom.predictor.runtime import ModelRuntime
from headroom.router.errors import PredictionUnavailable
from headroom.router.framework.engine import Engine
from headroom.router.framework.pipeline import load_pipeline
from headroom.router.framework.predictors import EmbeddedPredictor
from headroom.router.framework.roles import Context
from tests.keys import TRUST
from tests.predictor.models import candidate_rows, message, train
from tests.router.routercases import req, server


@pytest.fixture(scope="module")
def runtime():
    runtime = ModelRuntime(trust=TRUST)
    for target, version in (("ttft", 4), ("tpot", 5)):
        result = runtime.apply(message(train(target), version, pool_key="default", target=target))
        assert result.outcome.value == "applied", result
    return runtime


def test_predicts_with_versions(runtime):
    batch = EmbeddedPredictor(runtime).predict("default", candidate_rows(10))
    assert set(batch.values) == {"ttft", "tpot"} and batch.ok.all()
    assert batch.versions == {"ttft": 4, "tpot": 5}
    assert (batch.values["ttft"] > 0).all()


@pytest.mark.parametrize("make_runtime, pool, reason", [
    pytest.param(lambda: ModelRuntime(trust=TRUST), "default", "warm-up", id="warm-up"),
    pytest.param(None, "elsewhere", "no-model-for-pool", id="unknown-pool"),
])
def test_unavailable_reasons(runtime, make_runtime, pool, reason):
    predictor = EmbeddedPredictor(make_runtime() if make_runtime else runtime)
    with pytest.raises(PredictionUnavailable) as caught:
        predictor.predict(pool, candidate_rows(2))
    assert caught.value.reason == reason


def test_engine_uses_real_predictions_and_degrades_per_pool(runtime):
    engine = Engine(load_pipeline(None))
    servers = [server(f"s{i}", num_waiting=i, kv_cache_usage=0.1 * i) for i in range(5)] + [server("x", pool_key="other")]
    decision = engine.decide(req(max_tokens=100), servers, Context(random.Random(0), EmbeddedPredictor(runtime)))
    assert decision.profile == "predicted"
    assert (decision.fallback, decision.fallback_reasons) == ("partial", ("no-model-for-pool",))
    assert [c.predicted for c in decision.candidates] == [True] * 5 + [False]
