"""The predicted-latency producer's compiled twin against the plugin, with real models in process: the same
predictions, headroom, corrections and versions, and so the same decisions.

Two engines, one with the compiled twins and one with the plugins alone, decide the same random requests over the
same random pools (tests.router.predicted_cases) with one model runtime: a pool whose TTFT and E2E models were
trained on log milliseconds beside an identity TPOT model and quantile models (asked for now and then), a pool
without E2E, a pool without a TPOT model, pools without models, and now and then no predictor at all; scrapes now
and then stale, not finite, or deeper than any model saw.
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from headroom.predictor.kernels import MIN_ROWS_PER_THREAD
from headroom.predictor.runtime import ModelRuntime
from headroom.router.framework.candidate_set import CandidateSet
from headroom.router.framework.compiled_producer import CompiledProducer
from headroom.router.framework.engine import Engine
from headroom.router.framework.pipeline import load_pipeline
from headroom.router.framework.predictors import EmbeddedPredictor
from headroom.router.framework.roles import Context
from headroom.tpot_ratios import TpotRatios
from tests.keys import TRUST
from tests.predictor.models import message, train
from tests.router.predicted_cases import VARIED, facts, request_of, servers_of
from tests.router.routercases import server

CASES = 150
DECISIONS = 8

CALIBRATED = {**VARIED, "plugins": [
    {"type": "predicted-latency-producer", "name": "producer",
     "params": {"tpotQuantile": 0.9, "tpotLeast": 5, "sloBufferFactor": 0.9, "maxMetricsAgeMs": 2000}},
    *VARIED["plugins"][1:]]}


@pytest.fixture(scope="module")
def runtime() -> ModelRuntime:
    runtime = ModelRuntime(trust=TRUST)
    models = {  # pool: (target, objective, trained on log ms)
        "default": [("ttft", "mean", True), ("tpot", "mean", False), ("e2e", "mean", True),
                    ("ttft", "quantile", True), ("tpot", "quantile", False)],
        "h100": [("ttft", "mean", False), ("tpot", "mean", True)],
        "a100": [("ttft", "mean", True)],
    }
    for version, (pool, target, objective, log) in enumerate(
            ((pool, *model) for pool, listed in models.items() for model in listed), start=1):
        booster = train(target, objective, seed=version, trees=30, depth=5, log=log)
        result = runtime.apply(message(booster, version, pool_key=pool, target=target, objective=objective))
        assert result.outcome.value == "applied", result
    return runtime


@pytest.mark.parametrize("config", [pytest.param(None, id="default"), pytest.param(CALIBRATED, id="calibrated")])
def test_compiled_producer_predicts_as_the_plugin(runtime, config):
    twin, plugins = Engine(load_pipeline(config)), Engine(load_pipeline(config), compiled=False)
    assert isinstance(twin.compiled_producer, CompiledProducer) and plugins.compiled_producer is None
    produced = twin.compiled_producer.produce
    seen = {"twin": 0, "raised": 0, "fallback": 0}

    def counted(request, candidates, context):
        result = produced(request, candidates, context)
        seen["twin"] += result is not None
        seen["raised"] += result is not None and result.correction is not None and (
            result.correction[0] != candidates.servers.latency_correction[0]).any()
        return result

    twin.compiled_producer.produce = counted  # type: ignore[method-assign]
    ratios = TpotRatios()
    for i in range(40):
        ratios.add("default", 10.0, 10.0 + 0.137 * i)  # a factor of about 1.48
    for case in range(CASES):
        rng = random.Random(case)
        servers = servers_of(rng, fresh=False)
        objective = rng.choice(["mean", "mean", "quantile", None])  # None: no predictor
        contexts = [Context(random.Random(case * 31), objective and EmbeddedPredictor(runtime, objective), ratios)
                    for _ in range(2)]
        for i in range(DECISIONS):
            request = request_of(rng, i, sized=True)
            got, want = (engine.decide(request, servers, context)
                         for engine, context in ((twin, contexts[0]), (plugins, contexts[1])))
            assert repr(facts(got)) == repr(facts(want)), f"case {case}, decision {i}"  # NaN equals itself
            assert contexts[0].rng.getstate() == contexts[1].rng.getstate(), f"case {case}, decision {i}"
            seen["fallback"] += want.fallback is not None
    decisions = CASES * DECISIONS
    assert seen["twin"] > decisions / 3 and seen["raised"] > 20 and seen["fallback"] > decisions / 10, seen


def test_it_leaves_to_the_plugin_what_it_does_not_predict(runtime):
    twin = Engine(load_pipeline(None)).compiled_producer
    assert twin is not None
    candidates = CandidateSet.unpredicted([server(f"s{i}", num_waiting=i) for i in range(5)])
    request = request_of(random.Random(2), 0)
    embedded = Context(random.Random(0), EmbeddedPredictor(runtime))
    produced = twin.produce(request, candidates, embedded)
    assert produced is not None
    numpy_sized = replace(request, prompt_tokens=np.int64(request.prompt_tokens), max_tokens=np.float64(16))
    assert repr(list(twin.produce(numpy_sized, candidates, embedded))) == repr(list(  # NumPy numbers as Python's
        load_pipeline(None).predicted.producer.produce(numpy_sized, candidates, embedded)))
    assert twin.produce(request, candidates.take(np.array([0])), embedded) is None  # not every server
    many = ModelRuntime(trust=TRUST, threads=2)
    for raw in (message(train("ttft", seed=1), 1, pool_key="default"),
                message(train("tpot", seed=2), 2, pool_key="default", target="tpot")):
        many.apply(raw)
    crowd = CandidateSet.unpredicted([server(f"s{i}") for i in range(2 * MIN_ROWS_PER_THREAD)])
    assert twin.produce(request, crowd, Context(random.Random(0), EmbeddedPredictor(many))) is None  # threads'
