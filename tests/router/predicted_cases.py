"""Random pools and requests for the predicted profile's compiled twins, and what of a decision they compare."""

from __future__ import annotations

import math
import random
from dataclasses import replace

from headroom.router.framework.engine import Decision
from headroom.router.framework.pipeline import DEFAULT_PIPELINE
from headroom.router.framework.roles import Request, ServerSnapshot

KV_USAGES = (0.01, 0.3, 0.5, 0.7, 0.9, 0.95, math.nan, math.inf)  # the last two a scrape may send

# the default pipeline with every parameter of the predicted profile moved, its filters reordered and two weighted
# latency scorers
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


def servers_of(rng: random.Random, fresh: bool = True) -> list[ServerSnapshot]:
    """1–24 servers of one or two pools; unless ``fresh``, their metrics now and then stale and rarely not finite."""
    pools = ("h100", "a100") if rng.random() < 0.3 else ("default",)
    burst = rng.random() < 0.4  # prefill queued everywhere: where a request late everywhere is concentrated
    out = []
    for i in range(rng.randint(1, 24)):
        idle = rng.random() < 0.1
        out.append(ServerSnapshot(
            server_id=f"s{i}", address=f"127.0.0.1:{9000 + i}", pool_key=rng.choice(pools),
            kv_cache_usage=rng.choice(KV_USAGES if fresh or rng.random() < 0.01 else KV_USAGES[:-2]),
            num_waiting=0 if idle else rng.choice([0, 1, 4, 10**9]),
            num_running=0 if idle else rng.choice([1, 8]), inflight_requests=0 if idle else rng.choice([0, 2]),
            prefix_match=rng.choice([0.0, 0.0, 0.1, 0.2, 0.6, 0.995, 1.0]),
            inflight_prompt_tokens=4_000,
            inflight_prefill_tokens=rng.choice([800, 3_000, 3_000] if burst else [0, 0, 800, 3_000]),
            tpot_at_risk=rng.choice([0.0, 0.0, 0.0, 0.25, 1.0, 2.0]),
            running_tpot_slos_ms=rng.choice([(), (), (30.0,), (60.0, 25.0)]),
            latency_correction=rng.choice([(0.0, 0.0, 0.0), (0.3, -0.1, 0.2)]),
            prefill_ms_per_token=rng.choice([0.0, 0.0, 0.5]),
            metrics_age_s=0.0 if fresh else rng.choice([0.0, 0.3]) if rng.random() < 0.98 else 9.0))
    return out


def request_of(rng: random.Random, i: int, sized: bool = False) -> Request:
    """A request with or without SLOs, streaming or not, sheddable or not (its output cap drawn too, if ``sized``)."""
    request = Request(request_id=f"r{i}", prompt_tokens=rng.choice([64, 512, 4_000]), stream=rng.random() < 0.6,
                      slo_ttft_ms=rng.choice([None, 300.0, 1_000.0, 1_000.0, 5_000.0]),
                      slo_tpot_ms=rng.choice([None, 25.0, 50.0]), priority=rng.choice([0, -1]))
    return replace(request, max_tokens=rng.choice([0, 16, 1_000])) if sized else request


def facts(decision: Decision) -> tuple[object, ...]:
    """Everything of a decision the router reads."""
    chosen = decision.chosen
    return (decision.profile, decision.fallback, decision.fallback_reasons, decision.rejection,
            decision.heuristic_reason, decision.request,
            None if chosen is None else (chosen.server, chosen.prediction, chosen.fallback_reason,
                                         chosen.ttft_headroom_ms, chosen.tpot_headroom_ms),
            [(s.candidate.server.server_id, s.score) for s in decision.scored], list(decision.candidates))
