"""The heuristic profile's compiled twin against its Python plugins: the same decisions, draws and metrics.

Two routers' services with the same pool, the same seeded draws and the same clocks, one deciding with the compiled
twin and one with the plugins, take the same requests: random pools (sizes, scrapes with edge values, stale and
ejected servers, cached prefixes), random requests (opted out, full and partial fallbacks from the predictor, retries).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from prometheus_client import generate_latest

from headroom.contract.prompt import token_block_hashes
from headroom.contract.server_metrics import ServerMetrics
from headroom.router.control.metrics import RouterMetrics
from headroom.router.control.service import Dispatch, RouterService
from headroom.router.control.telemetry_sink import MemoryTelemetry
from headroom.router.errors import NoCandidates
from headroom.router.framework.engine import Decision, Engine
from headroom.router.framework.pipeline import DEFAULT_PIPELINE, load_pipeline
from headroom.router.state.pool import PoolState
from headroom.router.state.servers import ServerSpec
from tests.router.routercases import TablePredictor, ctx, req, server

CASES = 200
PICKS = 12


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _edge(rng: random.Random, usual: float) -> float:
    """Mostly ``usual``; now and then a value the scorers must clamp or a scrape could carry."""
    roll = rng.random()
    return usual if roll < 0.85 else rng.choice([0.0, 1.0, 1.5, -0.25, math.nan, math.inf])


def _service(case: int, compiled: bool, config: dict | None = None) -> tuple[RouterService, list[ServerSpec], Clock]:
    rng = random.Random(case)
    n = rng.randint(1, 24)
    pools = ("h100", "a100") if rng.random() < 0.5 else ("default",)
    specs = [ServerSpec(f"s{i}", f"127.0.0.1:{9000 + i}", rng.choice(pools)) for i in range(n)]
    clock = Clock()
    pool = PoolState(tuple(specs), unhealthy_after_s=5.0)
    same_queue = rng.random() < 0.2  # every queue equal: the queue scorer gives 1 everywhere
    idle = rng.random() < 0.1  # nothing anywhere: every score can be 0
    for spec in specs:
        usage = 1.0 if idle else _edge(rng, rng.uniform(0, 1))
        waiting = 3 if same_queue else rng.choice([rng.randrange(12), 0, 10_000])
        at = clock.now - (rng.choice([0.0, 1.0, 9.0]) if rng.random() < 0.2 else 0.0)  # some stale
        pool.scraped(spec.server_id, ServerMetrics(usage, waiting, rng.randrange(8)), at)
    predictor = TablePredictor(unavailable={p: "warm-up" for p in pools if rng.random() < 0.5})
    engine = Engine(load_pipeline(config), compiled=compiled)
    service = RouterService(engine, pool, MemoryTelemetry(limit=1), RouterMetrics(),
                            predictor=predictor if rng.random() < 0.7 else None, rng=random.Random(case * 7919),
                            monotonic=clock, wall=clock)
    return service, specs, clock


def _requests(case: int) -> list[tuple[object, bool]]:
    """The case's requests, each with whether its server fails it (a retry follows)."""
    rng = random.Random(-case)
    prompts = [[rng.randrange(50_000) for _ in range(rng.choice([16, 64, 200]))] for _ in range(3)]
    out = []
    for i in range(PICKS):
        prompt = rng.choice(prompts)[: rng.choice([16, 64, 200])]
        out.append((req(request_id=f"r{i}", prompt_tokens=len(prompt), block_hashes=token_block_hashes(prompt),
                        predict=rng.random() < 0.6, stream=rng.random() < 0.5), rng.random() < 0.15))
    return out


def _facts(decision: Decision) -> tuple[object, ...]:
    """Everything of a decision the router reads."""
    chosen = decision.chosen
    return (decision.profile, decision.fallback, decision.fallback_reasons, decision.rejection,
            decision.heuristic_reason, decision.request,
            None if chosen is None else (chosen.server, chosen.prediction, chosen.fallback_reason),
            [(s.candidate.server.server_id, s.score) for s in decision.scored], list(decision.candidates))


def _run(service: RouterService, clock: Clock, case: int) -> list[object]:
    seen: list[object] = []
    for request, fails in _requests(case):
        clock.now += 0.01
        try:
            dispatch: Dispatch = service.pick(request)
            seen.append(_facts(dispatch.decision))
            if fails:
                seen.append(_facts(service.retry(service.upstream_failed(dispatch, "connect")).decision))
        except NoCandidates as err:
            seen.append(str(err))
        seen.append(service.rng.getstate())
    return seen


def _metrics(service: RouterService) -> list[str]:
    """The metrics' exposition without the decisions' timings and the series' creation times."""
    return [line for line in generate_latest(service.metrics.registry).decode().splitlines()
            if "decision_seconds" not in line and "_created" not in line]


@pytest.mark.parametrize("config", [
    pytest.param(None, id="default"),
    pytest.param({**DEFAULT_PIPELINE, "profiles": [DEFAULT_PIPELINE["profiles"][0], {
        "name": "heuristic", "plugins": [{"ref": "prefix", "weight": 2.5}, {"ref": "kv-free", "weight": 0.5},
                                         {"ref": "queue", "weight": 1}, {"ref": "picker"}]}]}, id="weighted"),
])
def test_compiled_heuristic_decides_as_the_plugins(config):
    assert Engine(load_pipeline(config)).compiled is not None
    paths = {"heuristic": 0, "other": 0}
    for case in range(CASES):
        compiled, specs, compiled_clock = _service(case, True, config)
        python, _, python_clock = _service(case, False, config)
        got, want = _run(compiled, compiled_clock, case), _run(python, python_clock, case)
        assert repr(got) == repr(want), f"case {case}"  # by repr: a server's NaN state equals itself
        assert _metrics(compiled) == _metrics(python), f"case {case}"
        for fact in want:
            if isinstance(fact, tuple) and len(fact) == 9:
                paths["heuristic" if fact[0] == "heuristic" else "other"] += 1
    assert paths["heuristic"] > CASES * PICKS / 2 and paths["other"] > 100  # both profiles were exercised


MEASURES = [0.0, 1.0, -1.0, 2.0, math.nan, math.inf, -math.inf, 0.3, 5.0, 1e-300]


@pytest.mark.parametrize("column, values", [("kv_cache_usage", MEASURES), ("prefix_match", MEASURES),
                                            ("num_waiting", [0, 1, 3, 100, 10**9])])
def test_compiled_heuristic_scores_edge_columns_as_the_plugins(column, values):
    for seed in range(60):
        rng = random.Random(seed)
        servers = [server(f"s{i}", num_running=0, **{column: rng.choice(values)}) for i in range(rng.randint(1, 6))]
        decisions = [Engine(load_pipeline(None), compiled=compiled).decide(req(predict=False), servers, ctx(seed))
                     for compiled in (True, False)]
        assert repr(_facts(decisions[0])) == repr(_facts(decisions[1]))
        assert np.array_equal(decisions[0].scored.scores, decisions[1].scored.scores)  # type: ignore[attr-defined]


@pytest.mark.parametrize("heuristic", [
    pytest.param([{"ref": "kv-free"}, {"ref": "queue"}, {"ref": "prefix"}, {"ref": "predicted-picker"}], id="max-score"),
    pytest.param([{"ref": "affinity"}, {"ref": "kv-free"}, {"ref": "picker"}], id="a-filter"),
    pytest.param([{"ref": "picker"}], id="no-scorer"),
    pytest.param([{"ref": "kv-free"}, {"ref": "sharp"}], id="sharpness"),
])
def test_other_profiles_stay_with_the_plugins(heuristic):
    config = {**DEFAULT_PIPELINE,
              "plugins": [*DEFAULT_PIPELINE["plugins"],
                          {"type": "weighted-random-picker", "name": "sharp", "params": {"sharpness": 2.0}}],
              "profiles": [DEFAULT_PIPELINE["profiles"][0], {"name": "heuristic", "plugins": heuristic}]}
    assert Engine(load_pipeline(config)).compiled is None
