"""The predicted profile's compiled twin against its Python plugins: the same survivors, scores, rejections, picks
and draws.

Two engines, one with the twin and one with the plugins, decide the same random requests over the same random pools
with the same predictions and the same seeded RNG: pools of 1–24 servers with cached prefixes, prefill queued,
streams at risk, idle and cold servers, scrapes a server could send (NaN, infinite), ties; requests with and
without SLOs, streaming or not, sheddable or not; predictions late everywhere, in time somewhere, with and without
E2E, now and then unusable (which leaves the request to the plugins).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from headroom.router.framework.engine import Engine
from headroom.router.framework.pipeline import DEFAULT_PIPELINE, load_pipeline
from headroom.router.framework.roles import Context, PredictionBatch
from tests.router.predicted_cases import VARIED, facts, request_of, servers_of

CASES = 200
DECISIONS = 8


class DrawnPredictor:
    """Predictions drawn from its own seeded RNG, so two engines given twins of it see the same ones."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def predict(self, pool_key: str, features: np.ndarray) -> PredictionBatch:
        rng, n = self.rng, features.shape[0]
        scale = rng.choice([0.2, 1.0, 5.0, 30.0])  # everyone in time, some, most late, everyone
        ttft = np.array([scale * rng.choice([40.0, 200.0, 200.0, 900.0, 1_000.0, 3_000.0, 12_000.0]) for _ in range(n)])
        values = {"ttft": ttft, "tpot": np.array([rng.choice([5.0, 20.0, 20.0, 45.0, 80.0]) for _ in range(n)])}
        if rng.random() < 0.3:
            values["e2e"] = ttft + np.array([rng.choice([100.0, 2_000.0]) for _ in range(n)])
        ok = np.array([rng.random() > 0.005 for _ in range(n)])  # now and then a row unusable: a partial fallback
        return PredictionBatch(values=values, ok=ok, versions={"ttft": 2, "tpot": 2})


@pytest.mark.parametrize("config", [pytest.param(None, id="default"), pytest.param(VARIED, id="varied")])
def test_compiled_predicted_decides_as_the_plugins(config):
    twin, plugins = Engine(load_pipeline(config)), Engine(load_pipeline(config), compiled=False)
    assert twin.compiled_predicted is not None and plugins.compiled_predicted is None
    seen = {"compiled": 0, "narrowed": 0, "rejected": 0, "partial": 0}
    for case in range(CASES):
        rng = random.Random(case)
        servers = servers_of(rng)
        contexts = [Context(rng=random.Random(case * 31), predictor=DrawnPredictor(case)) for _ in range(2)]
        for i in range(DECISIONS):
            request = request_of(rng, i)
            got, want = (engine.decide(request, servers, context)
                         for engine, context in ((twin, contexts[0]), (plugins, contexts[1])))
            assert repr(facts(got)) == repr(facts(want)), f"case {case}, decision {i}"  # NaN equals itself
            assert contexts[0].rng.getstate() == contexts[1].rng.getstate(), f"case {case}, decision {i}"
            if want.profile == "predicted" and want.fallback is None:
                seen["compiled"] += 1
                seen["narrowed"] += len(want.scored) < len(servers)
                seen["rejected"] += want.rejection is not None
            seen["partial"] += want.fallback == "partial"
    assert seen["compiled"] > CASES * DECISIONS / 2 and seen["narrowed"] > 300, seen
    assert seen["rejected"] > 20 and seen["partial"] > 20, seen


@pytest.mark.parametrize("profile", [
    pytest.param([{"ref": "producer"}, {"ref": "latency"}, {"ref": "picker"}], id="weighted-random-picker"),
    pytest.param([{"ref": "producer"}, {"ref": "latency"}, {"ref": "queue"}, {"ref": "predicted-picker"}],
                 id="a-heuristic-scorer"),
])
def test_other_predicted_profiles_stay_with_the_plugins(profile):
    config = {**DEFAULT_PIPELINE, "profiles": [{"name": "predicted", "plugins": profile},
                                               DEFAULT_PIPELINE["profiles"][1]]}
    assert Engine(load_pipeline(config)).compiled_predicted is None
