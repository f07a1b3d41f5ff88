"""The predicted profile's compiled twin against its Python plugins: the same survivors, scores, rejections, picks
and draws.

Two engines, one with the twin and one with the plugins, decide the same random requests over the same random pools
with the same predictions and the same seeded RNG: pools of 1–24 servers with cached prefixes, prefill queued,
streams at risk, idle and cold servers, scrapes a server could send (NaN, infinite), ties; requests with and
without SLOs, streaming or not, sheddable or not; predictions late everywhere, in time somewhere, with and without
E2E, now and then unusable (which leaves the request to the plugins).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from headroom.router.framework.engine import Decision, Engine
from headroom.router.framework.pipeline import DEFAULT_PIPELINE, load_pipeline
from headroom.router.framework.roles import Context, PredictionBatch, Request, ServerSnapshot

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


def _servers(rng: random.Random) -> list[ServerSnapshot]:
    pools = ("h100", "a100") if rng.random() < 0.3 else ("default",)
    burst = rng.random() < 0.4  # prefill queued everywhere: where a request late everywhere is concentrated
    out = []
    for i in range(rng.randint(1, 24)):
        idle = rng.random() < 0.1
        out.append(ServerSnapshot(
            server_id=f"s{i}", address=f"127.0.0.1:{9000 + i}", pool_key=rng.choice(pools),
            kv_cache_usage=rng.choice([0.01, 0.3, 0.5, 0.7, 0.9, 0.95, math.nan, math.inf]),
            num_waiting=0 if idle else rng.choice([0, 1, 4, 10**9]),
            num_running=0 if idle else rng.choice([1, 8]), inflight_requests=0 if idle else rng.choice([0, 2]),
            prefix_match=rng.choice([0.0, 0.0, 0.1, 0.2, 0.6, 0.995, 1.0]),
            inflight_prompt_tokens=4_000,
            inflight_prefill_tokens=rng.choice([800, 3_000, 3_000] if burst else [0, 0, 800, 3_000]),
            tpot_at_risk=rng.choice([0.0, 0.0, 0.0, 0.25, 1.0, 2.0]),
            running_tpot_slos_ms=rng.choice([(), (), (30.0,), (60.0, 25.0)]),
            latency_correction=rng.choice([(0.0, 0.0, 0.0), (0.3, -0.1, 0.2)]),
            prefill_ms_per_token=rng.choice([0.0, 0.0, 0.5])))
    return out


def _request(rng: random.Random, i: int) -> Request:
    return Request(request_id=f"r{i}", prompt_tokens=rng.choice([64, 512, 4_000]), stream=rng.random() < 0.6,
                   slo_ttft_ms=rng.choice([None, 300.0, 1_000.0, 1_000.0, 5_000.0]),
                   slo_tpot_ms=rng.choice([None, 25.0, 50.0]), priority=rng.choice([0, -1]))


def _facts(decision: Decision) -> tuple[object, ...]:
    """Everything of a decision the router reads."""
    chosen = decision.chosen
    return (decision.profile, decision.fallback, decision.fallback_reasons, decision.rejection,
            decision.heuristic_reason, decision.request,
            None if chosen is None else (chosen.server, chosen.prediction, chosen.fallback_reason,
                                         chosen.ttft_headroom_ms, chosen.tpot_headroom_ms),
            [(s.candidate.server.server_id, s.score) for s in decision.scored], list(decision.candidates))


VARIED = {**DEFAULT_PIPELINE, "plugins": [
    {"type": "predicted-latency-producer", "name": "producer"},
    {"type": "prefix-cache-affinity-filter", "name": "affinity",
     "params": {"strictThreshold": 0, "explorationProbability": 0.3, "maxTTFTPenaltyMs": 300}},
    {"type": "slo-headroom-tier-filter", "name": "tiers", "params": {"epsilonExploreNeg": 0.3}},
    {"type": "late-concentration-filter", "name": "concentrate",
     "params": {"lateMargin": 0.1, "includeTPOT": False, "onlyInABurst": False, "lateCap": 4, "lateSlack": 2}},
    {"type": "tpot-protection-filter", "name": "protect",
     "params": {"tolerance": 0.5, "ttftMargin": 0.2, "ttftPenalty": 0.5}},
    {"type": "latency-scorer", "name": "latency", "params": {"headroomSelectionStrategy": "least"}},
    {"type": "latency-scorer", "name": "ttft-only", "params": {"ttftWeight": 1, "tpotWeight": 0}},
    {"type": "latency-slo-admitter", "name": "admitter", "params": {"protectRunning": False}},
    *[p for p in DEFAULT_PIPELINE["plugins"] if p["name"] in ("kv-free", "queue", "prefix", "picker")],
    {"type": "max-score-picker", "name": "predicted-picker", "params": {"tieTolerance": 0.05}},
], "profiles": [
    {"name": "predicted", "plugins": [{"ref": "producer"}, {"ref": "protect"}, {"ref": "affinity"},
                                      {"ref": "concentrate"}, {"ref": "tiers"}, {"ref": "latency", "weight": 2},
                                      {"ref": "ttft-only", "weight": 0.5}, {"ref": "admitter"},
                                      {"ref": "predicted-picker"}]},
    DEFAULT_PIPELINE["profiles"][1]]}


@pytest.mark.parametrize("config", [pytest.param(None, id="default"), pytest.param(VARIED, id="varied")])
def test_compiled_predicted_decides_as_the_plugins(config):
    twin, plugins = Engine(load_pipeline(config)), Engine(load_pipeline(config), compiled=False)
    assert twin.compiled_predicted is not None and plugins.compiled_predicted is None
    seen = {"compiled": 0, "narrowed": 0, "rejected": 0, "partial": 0}
    for case in range(CASES):
        rng = random.Random(case)
        servers = _servers(rng)
        contexts = [Context(rng=random.Random(case * 31), predictor=DrawnPredictor(case)) for _ in range(2)]
        for i in range(DECISIONS):
            request = _request(rng, i)
            got, want = (engine.decide(request, servers, context)
                         for engine, context in ((twin, contexts[0]), (plugins, contexts[1])))
            assert repr(_facts(got)) == repr(_facts(want)), f"case {case}, decision {i}"  # NaN equals itself
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
