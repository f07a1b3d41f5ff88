"""Decision-latency benchmark (``headroom bench router``): one scheduling decision over N candidates with
embedded prediction.

Trains TTFT and TPOT XGBoost models of the reference's size (200 trees, depth 6, by default) on
synthetic rows, applies them to an in-process :class:`predictor.runtime.ModelRuntime`, fills a pool of
N servers with varied state, and times :meth:`router.control.service.RouterService.pick` (pool snapshots,
feature matrix, prediction, filters, scorers, admitter, picker, in-flight accounting) plus, separately,
the prediction call alone. Requests are released after each pick so the pool state stays the same.
Every server is re-scraped (same metrics, untimed) each ``SCRAPE_INTERVAL_S``, as the router's scraper
would, so metrics never go stale and the cost of fresh scrapes lands in the decisions that follow them.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headroom.benchmarks.predictor import BENCH_KEY, BENCH_TRUST, EFFECTIVE_PROMPT, candidates
from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.model_update import encode_update, make_update
from headroom.contract.server_metrics import ServerMetrics
from headroom.contract.signing import TrustedKeys
from headroom.router.control.metering import Completion
from headroom.router.control.metrics import RouterMetrics
from headroom.router.control.service import RouterService
from headroom.router.control.telemetry_sink import MemoryTelemetry
from headroom.router.framework.candidate_features import candidate_features
from headroom.router.framework.engine import Engine
from headroom.router.framework.pipeline import load_pipeline
from headroom.router.framework.predictors import EmbeddedPredictor
from headroom.router.framework.roles import Candidate, Request
from headroom.router.state.pool import PoolState
from headroom.router.state.servers import ServerSpec

SCRAPE_INTERVAL_S = 0.05  # the reference's scrape interval


@dataclass(frozen=True)
class BenchResult:
    candidates: int
    decisions: int
    trees: int
    depth: int
    slo: bool
    engine: str
    pick_p50_ms: float
    pick_p99_ms: float
    pick_max_ms: float
    pick_cpu_p50_ms: float  # CPU time of the deciding thread: what the decision costs without preemption
    pick_cpu_p99_ms: float
    predict_p50_ms: float
    predict_p99_ms: float


def _model_update(target: str, trees: int, depth: int, version: int) -> bytes:
    import xgboost

    from headroom.trainer.fit import model_bytes

    rng = np.random.default_rng(version)
    x = candidates(4000, seed=version)
    base = {"ttft": 30.0, "tpot": 8.0}[target]
    load = 1 + 3 * x[:, 0] + 0.2 * x[:, 1] + 0.02 * x[:, 2]
    y = base * load + 0.01 * x[:, EFFECTIVE_PROMPT] + rng.exponential(base * 0.2, len(x))
    params = {"max_depth": depth, "eta": 0.05, "subsample": 0.8, "colsample_bytree": 0.8, "min_child_weight": 5,
              "gamma": 0.2, "alpha": 0.01, "lambda": 0.1, "tree_method": "hist", "nthread": 1, "seed": version}
    booster = xgboost.train(params, xgboost.DMatrix(x, label=y), trees)
    return BENCH_KEY.sign(encode_update(make_update(
        model=model_bytes(booster), version=version, pool_key="default", target=target, objective="mean",
        quantile=None, feature_schema=FEATURE_SCHEMA, model_format="ubj", created_at=time.time(),
        window_stats={"rows": len(x)}, holdout_metrics={})))


def reference_updates(trees: int = 200, depth: int = 6) -> list[bytes]:
    """TTFT and TPOT model updates of ``trees`` trees of ``depth`` (the reference's size by default), signed with
    this process's bench key."""
    return [_model_update(target, trees, depth, version) for version, target in enumerate(("ttft", "tpot"), start=1)]


def embedded_predictor(trees: int = 200, depth: int = 6, updates: Sequence[bytes] | None = None,
                       trust: TrustedKeys = BENCH_TRUST) -> EmbeddedPredictor:
    """An in-process predictor with ``updates`` applied, read as a router reads them (by default
    :func:`reference_updates` of ``trees`` and ``depth``, trained here)."""
    from headroom.predictor.runtime import ModelRuntime
    runtime = ModelRuntime(trust=trust)
    for raw in reference_updates(trees, depth) if updates is None else updates:
        result = runtime.apply(raw)
        if result.outcome.value != "applied":
            raise RuntimeError(f"a benchmark model was not applied: {result}")
    return EmbeddedPredictor(runtime)


def decision_latency(candidates: int = 100, decisions: int = 5000, *, trees: int = 200, depth: int = 6,
                     slo: bool = False, seed: int = 0, embedded: bool = True) -> BenchResult:
    """``embedded``: decide with in-process models (the predicted profile); without, as a router without a predictor
    decides (the heuristic profile)."""
    predictor = embedded_predictor(trees, depth) if embedded else None
    rng = random.Random(seed)
    specs = tuple(ServerSpec(f"s{i}", f"10.0.{i // 250}.{i % 250}:8000") for i in range(candidates))
    pool = PoolState(specs)
    metrics = {s.server_id: ServerMetrics(rng.uniform(0, 0.9), rng.randrange(8), rng.randrange(1, 40)) for s in specs}
    scraped_at = -float("inf")
    service = RouterService(Engine(load_pipeline(None)), pool, MemoryTelemetry(limit=1), RouterMetrics(),
                            predictor=predictor, rng=rng)
    hashes = tuple(rng.getrandbits(63) for _ in range(64))
    picks: list[float] = []
    cpus: list[float] = []
    predicts: list[float] = []
    features = None
    for i in range(decisions + 200):  # the first 200 warm up caches and JIT kernels
        request = Request(request_id=f"r{i}", prompt_tokens=1024, max_tokens=256, stream=slo,
                          slo_ttft_ms=800.0 if slo else None, slo_tpot_ms=60.0 if slo else None,
                          block_hashes=hashes[: rng.randrange(64)])
        if time.monotonic() - scraped_at >= SCRAPE_INTERVAL_S:
            scraped_at = time.monotonic()
            for server_id, scraped in metrics.items():
                pool.scraped(server_id, scraped, scraped_at)
        started, cpu_started = time.perf_counter(), time.thread_time()
        dispatch = service.pick(request)
        elapsed, cpu = time.perf_counter() - started, time.thread_time() - cpu_started
        if predictor is not None:
            if features is None:
                features = candidate_features(request, [Candidate(s) for s in pool.snapshots(request, time.monotonic())])
            started = time.perf_counter()
            predictor.predict("default", features)
            predicts.append((time.perf_counter() - started) * 1000)
        service.complete(dispatch, Completion(e2e_ms=100.0, output_tokens=2, ttft_ms=50.0 if slo else None,
                                              tpot_ms=50.0 if slo else None))
        if i >= 200:
            picks.append(elapsed * 1000)
            cpus.append(cpu * 1000)
    predicts = predicts[200:] or [math.nan]
    p = np.percentile
    engine = predictor.runtime.engine if predictor is not None else "none: the heuristic profile"
    return BenchResult(candidates, decisions, trees, depth, slo, engine, float(p(picks, 50)), float(p(picks, 99)),
                       float(max(picks)), float(p(cpus, 50)), float(p(cpus, 99)), float(p(predicts, 50)),
                       float(p(predicts, 99)))


def print_report(result: BenchResult) -> None:
    from rich.console import Console
    from rich.table import Table
    models = (f"{result.trees} trees × depth {result.depth} per model, kernel {result.engine}"
              if not math.isnan(result.predict_p50_ms) else f"predictor {result.engine}")
    table = Table(title=f"Decision latency: {result.candidates} candidates, {result.decisions} decisions, {models}, "
                        f"{'SLO streaming' if result.slo else 'no-SLO'} requests")
    for column in ("what", "p50 ms", "p99 ms"):
        table.add_column(column)
    table.add_row("whole decision (pick)", f"{result.pick_p50_ms:.3f}", f"{result.pick_p99_ms:.3f}")
    table.add_row("whole decision, CPU time", f"{result.pick_cpu_p50_ms:.3f}", f"{result.pick_cpu_p99_ms:.3f}")
    table.add_row("prediction call alone", f"{result.predict_p50_ms:.3f}", f"{result.predict_p99_ms:.3f}")
    Console().print(table)
    print(f"max decision: {result.pick_max_ms:.3f} ms")
