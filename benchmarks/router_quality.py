"""Routing quality on the offline simulator: predicted-latency routing vs baselines and the oracle.

    .venv/bin/python benchmarks/router_quality.py [--trace azure|mooncake] [--requests 3000]

A pool of 16 simulated H100 servers (Llama-3-8B profile) replays a public trace, time-scaled to several
utilizations of the pool's capacity (see :mod:`sim.capacity`). The latency models are trained first, on a
separate slice of the same trace routed at random at every load (so the models see varied states), with
the reference hyperparameters; the router then schedules the evaluation slice through its real engine
(:class:`router.engine.Engine`, default pipeline, predictions from the in-process model runtime). The
router's view is the simulator's: scraped metrics every 50 ms, its own in-flight accounting, and the
prefix match of each server's actual cache (the upper bound of the router's own estimate).

Policies: round-robin, least-queue, the composite heuristic (the reference's fallback), predicted-latency
routing without SLO headers, with SLO headers under each ``headroomSelectionStrategy`` (``least`` packs,
``most`` spreads), optionally again with other picker sharpness or affinity thresholds than the
router's defaults (``--sharpness``, ``--affinity``; the models are trained with the defaults either
way), and the oracle (each request to the server with its lowest true TTFT, found by simulating
forward). SLO attainment counts requests with TTFT ≤ the TTFT SLO and TPOT ≤ the TPOT SLO; goodput is
such requests per second. With ``--seeds N`` every run is repeated with seeds 0…N−1 and the table gives means.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from headroom.process import configure

configure()

import numpy as np  # noqa: E402
import xgboost  # noqa: E402

from headroom.backtest.router_policy import engine_pick  # noqa: E402
from headroom.contract.features import FEATURE_SCHEMA, records_matrix  # noqa: E402
from headroom.contract.model_update import make_update  # noqa: E402
from headroom.contract.signing import TrustedKeys  # noqa: E402
from headroom.contract.targets import target_value  # noqa: E402
from headroom.predictor.runtime import ModelRuntime  # noqa: E402
from headroom.router.predictors import EmbeddedPredictor  # noqa: E402
from headroom.sim.capacity import capacity_rps  # noqa: E402
from headroom.sim.oracle import oracle_pick  # noqa: E402
from headroom.sim.policies import policy  # noqa: E402
from headroom.sim.pool import run, uniform_pool  # noqa: E402
from headroom.sim.results import quantile  # noqa: E402
from headroom.sim.traces import load_azure, load_mooncake  # noqa: E402
from headroom.trainer.params import TrainParams  # noqa: E402

SERVERS = 16
LOADS = (1.0, 2.0, 3.0, 4.0)


def trace_slices(trace: str, n: int, rate: float | None):
    loader = load_azure if trace == "azure" else load_mooncake
    requests = loader(rate=rate, limit=2 * n)
    train, evaluate = requests[:n], requests[n:]
    start = evaluate[0].arrival_s
    return train, [replace(r, arrival_s=r.arrival_s - start) for r in evaluate]


def train_runtime(trace: str, n: int, capacity: float, loads, slo) -> tuple[ModelRuntime, int]:
    """Round 1 trains on random routing; round 2 adds what the router's own decisions produce (as the
    online pipeline would) and retrains on both."""
    records = []
    for load in loads:
        train, _ = trace_slices(trace, n, load * SERVERS * capacity)
        records += run(train, uniform_pool(SERVERS), policy("random", seed=1), seed=1).records
    runtime = ModelRuntime(trust=TrustedKeys())  # models made here are applied directly, not read from Kafka
    _fit(runtime, records, version=1)
    for load in loads:
        train, _ = trace_slices(trace, n, load * SERVERS * capacity)
        for pick in (router_pick(runtime, None, seed=2), router_pick(runtime, slo, seed=3)):
            records += run(train, uniform_pool(SERVERS), pick, seed=1).records
    _fit(runtime, records, version=2)
    return runtime, len(records)


def _fit(runtime: ModelRuntime, records, version: int) -> None:
    """Fit and apply TTFT and TPOT models; a model the runtime's probe rejects (a negative prediction on
    an extreme probe row) is refitted with another seed, and if none passes the previous version serves."""
    for target in ("ttft", "tpot"):
        rows = [r for r in records if target_value(r, target) is not None]
        y = np.array([target_value(r, target) for r in rows])
        data = xgboost.DMatrix(records_matrix(rows), label=y)
        for seed in range(5):
            params = TrainParams(seed=seed)
            booster = xgboost.train(params.booster_params(), data, params.n_trees)
            result = runtime.apply_update(make_update(
                model=bytes(booster.save_raw("ubj")), version=version, pool_key="h100", target=target,
                objective="mean", quantile=None, feature_schema=FEATURE_SCHEMA, model_format="ubj",
                created_at=time.time(), window_stats={"rows": len(rows)}, holdout_metrics={}))
            if result.outcome.value == "applied":
                break
            print(f"# {target} v{version} seed {seed} rejected: {result.reason} {result.detail}", file=sys.stderr)
        if runtime.version("h100", target, "mean") is None:
            raise RuntimeError(f"no {target} model passed the runtime's checks")


def router_pick(runtime: ModelRuntime, slo: tuple[float, float] | None, seed: int = 0, strategy: str = "most",
                sharpness: float | None = None, affinity: float | None = None):
    """The router's default pipeline with the given strategy and, when given, picker sharpness and affinity
    threshold."""
    overlays = {"prefix-cache-affinity-filter": {"affinityThreshold": affinity}} if affinity is not None else None
    return engine_pick(EmbeddedPredictor(runtime), slo=slo, seed=seed, plugin_params=overlays,
                       scorer_params={"headroomSelectionStrategy": strategy},
                       picker_params=None if sharpness is None else {"sharpness": sharpness})


def row(name, load, requests, result, slo):
    out = result.outcomes
    span = max(o.completion_s for o in out) - min(r.arrival_s for r in requests)
    ttfts = [o.ttft_ms for o in out]
    tpots = [t for o in out if (t := o.tpot_ms) is not None]
    met = sum(1 for o in out if o.ttft_ms <= slo[0] and (o.tpot_ms is None or o.tpot_ms <= slo[1]))
    return (name, load, quantile(ttfts, 0.5), quantile(ttfts, 0.99), quantile(tpots, 0.99),
            met / len(requests), met / span, len(out) / len(requests))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", choices=("azure", "mooncake"), default="azure")
    parser.add_argument("--requests", type=int, default=3000, help="Requests in the evaluation slice (and in training).")
    parser.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    parser.add_argument("--slo-tpot-ms", type=float, default=50.0)
    parser.add_argument("--loads", default=",".join(map(str, LOADS)), help="Utilizations of the pool's capacity.")
    parser.add_argument("--sharpness", default="",
                        help="Comma-separated picker sharpness values to compare with the router's default "
                             "(e.g. 1, the reference's).")
    parser.add_argument("--affinity", default="",
                        help="Comma-separated affinityThreshold values to compare with the router's default "
                             "(e.g. 0.8, the reference's).")
    parser.add_argument("--no-oracle", action="store_true")
    parser.add_argument("--seeds", type=int, default=1,
                        help="Repeat each run with this many seeds (simulator and pickers) and report the means; "
                             "SLO attainment also gives the range.")
    args = parser.parse_args()
    slo = (args.slo_ttft_ms, args.slo_tpot_ms)
    capacity = capacity_rps(trace_slices(args.trace, args.requests, None)[0])
    started = time.time()
    loads = [float(x) for x in args.loads.split(",")]
    runtime, rows = train_runtime(args.trace, args.requests, capacity, loads, slo)
    print(f"# {args.trace}: capacity {capacity:.2f} req/s per server; trained on {rows} records "
          f"in {time.time() - started:.0f} s")
    print("| policy | load | TTFT p50 ms | TTFT p99 ms | TPOT p99 ms | SLO attainment | goodput req/s | completed |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for load in loads:
        _, requests = trace_slices(args.trace, args.requests, load * SERVERS * capacity)
        policies = [("round-robin", lambda seed: policy("round-robin", seed)),
                    ("least-queue", lambda seed: policy("least-queue", seed)),
                    ("composite", lambda seed: policy("composite", seed))]
        for k in [None] + [float(x) for x in args.sharpness.split(",") if x]:
            for affinity in [None] + [float(x) for x in args.affinity.split(",") if x]:
                suffix = ("" if k is None else f" k={k:g}") + ("" if affinity is None else f" aff={affinity:g}")
                options = {"sharpness": k, "affinity": affinity}
                policies += [
                    (f"predicted{suffix}", lambda seed, o=options: router_pick(runtime, None, seed, **o)),
                    (f"predicted+SLO least{suffix}",
                     lambda seed, o=options: router_pick(runtime, slo, seed, strategy="least", **o)),
                    (f"predicted+SLO most{suffix}",
                     lambda seed, o=options: router_pick(runtime, slo, seed, strategy="most", **o))]
        if not args.no_oracle:
            policies.append(("oracle", lambda seed: oracle_pick))
        for name, make in policies:
            runs = [row(name, load, requests, run(requests, uniform_pool(SERVERS), make(seed), seed=seed), slo)
                    for seed in range(args.seeds)]
            r = [name, load, *np.mean([r[2:] for r in runs], axis=0)]
            attained = [r[5] for r in runs]
            spread = f" ({min(attained):.3f}–{max(attained):.3f})" if args.seeds > 1 else ""
            print(f"| {r[0]} | {r[1]:.2f} | {r[2]:.0f} | {r[3]:.0f} | {r[4]:.1f} | {r[5]:.3f}{spread} | {r[6]:.2f} | "
                  f"{r[7]:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
