"""Routing quality on the offline simulator: headroom's router against every baseline and the oracle.

    .venv/bin/python -m headroom.benchmarks.router_quality --trace PATH|azure|mooncake|code[:k=v,...] [--format F]
        [--requests 3000] [--loads 0.5,1,1.5,2] [--train-loads ...] [--seeds 3]

A pool of 16 simulated H100 servers (Llama-3-8B profile) replays a trace — a file in the Azure (CSV) or
Mooncake (JSON lines) format, or a named synthetic load such as the bursty code-completion one
(:func:`sim.traces.load_trace`) — time-scaled to multiples of the pool's capacity (:func:`sim.capacity.capacity_rps`:
one server's completion rate when flooded, without prefix caching). The first N requests train, the next N
are evaluated. Training, as the online pipeline would see it: round 1 fits TTFT and TPOT models on random
routing at every training load, round 2 adds the records of the router's own decisions and refits
(reference hyperparameters); the training loads may differ from the evaluation loads, to test the models
past their range. Every request streams.

Policies: every baseline of :mod:`benchmarks.routing_policies` (deterministic ones run once, the others
once per seed), ``headroom`` (the router's default pipeline, SLO headers on every request; with
``--pool-slo`` no headers but the pipeline's pool-level ``defaultSLO``), ``headroom no-SLO`` (neither),
any ``--variant NAME=JSON`` (a pipeline file or plugin overlays, see :func:`variant`), and the greedy oracle. A ``--sheddable`` share of the requests is sheddable
(priority −1): a policy may reject them, and a rejected request counts as a miss.

Columns: TTFT p50 / mean / p99 and TPOT p99 (ms) of the served requests; SLO attainment (TTFT ≤ its SLO and
TPOT ≤ its SLO, over all requests; the range over seeds), TTFT-only and TPOT-only attainment; goodput
(requests within SLO per second); the share served. A summary per load compares headroom with the best
baseline there (highest attainment, then lowest p99 TTFT) and with the oracle.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import xgboost
import yaml

from headroom.benchmarks.routing_policies import BASELINES, Factory, headroom, oracle
from headroom.contract.features import FEATURE_SCHEMA, records_matrix
from headroom.contract.model_update import TRANSFORM_ATTRIBUTE, make_update
from headroom.contract.signing import TrustedKeys
from headroom.contract.targets import target_value
from headroom.contract.telemetry import TelemetryRecord
from headroom.predictor.runtime import ModelRuntime
from headroom.router.framework.pipeline import DEFAULT_PIPELINE
from headroom.router.framework.predictors import EmbeddedPredictor
from headroom.router.framework.roles import LatencyPredictor
from headroom.sim.capacity import capacity_rps
from headroom.sim.policies import policy
from headroom.sim.pool import SimServerSpec, run, uniform_pool
from headroom.sim.request import SimRequest
from headroom.sim.results import RunResult, quantile
from headroom.sim.traces import load_trace
from headroom.sim.view import PickFunction
from headroom.trainer.fit import model_bytes, training_target
from headroom.trainer.params import TrainParams

SERVERS = 16


@dataclass(frozen=True)
class Workload:
    source: str
    format: str | None
    requests: int
    seed: int = 0
    sheddable: float = 0.0

    def slices(self, rate: float | None) -> tuple[list[SimRequest], list[SimRequest]]:
        """The training and evaluation slices at ``rate`` (the evaluation slice starts at 0)."""
        loaded = load_trace(self.source, self.format, rate=rate, limit=2 * self.requests, seed=self.seed)
        if len(loaded) < 2 * self.requests:
            raise SystemExit(f"{self.source}: {len(loaded)} requests, {2 * self.requests} needed")
        rng = random.Random(self.seed)
        loaded = [replace(r, priority=-1) if rng.random() < self.sheddable else r for r in loaded]
        train, evaluate = loaded[:self.requests], loaded[self.requests:]
        start = evaluate[0].arrival_s
        return train, [replace(r, arrival_s=r.arrival_s - start) for r in evaluate]


def train_runtime(work: Workload, capacity: float, loads: Sequence[float], slo: tuple[float, float], routers: int = 1,
                  prefix_knowledge: str = "cache") -> tuple[ModelRuntime, list[TelemetryRecord]]:
    """:func:`train_models` on the training slice of ``work`` at each of ``loads`` (multiples of the capacity of
    :data:`SERVERS` H100 servers)."""
    runs = [(work.slices(load * SERVERS * capacity)[0], uniform_pool(SERVERS)) for load in loads]
    return train_models(runs, slo, routers, prefix_knowledge)


def train_models(runs: Sequence[tuple[Sequence[SimRequest], Sequence[SimServerSpec]]], slo: tuple[float, float],
                 routers: int = 1, prefix_knowledge: str = "cache") -> tuple[ModelRuntime, list[TelemetryRecord]]:
    """Round 1 trains on random routing of each ``(requests, pool)`` of ``runs``; round 2 adds what the router's own
    decisions produce on them (as the online pipeline would) and retrains on both. With ``routers`` > 1, the
    telemetry is that of as many router replicas sharing the pool (:func:`sim.pool.run`)."""
    records: list[TelemetryRecord] = []
    for requests, pool in runs:
        records += run(requests, pool, [policy("random", seed=1 + r) for r in range(routers)], seed=1,
                       routers=routers, prefix_knowledge=prefix_knowledge).records
    runtime = ModelRuntime(trust=TrustedKeys())  # models made here are applied directly, not read from Kafka
    fit_models(runtime, records, version=1)
    predictor = EmbeddedPredictor(runtime)
    for requests, pool in runs:
        for seed, objective in ((2, None), (3, slo)):
            picks = [headroom(predictor, objective, seed=seed + 10 * r) for r in range(routers)]
            records += run(requests, pool, picks, seed=1, routers=routers,
                           prefix_knowledge=prefix_knowledge).records
    fit_models(runtime, records, version=2)
    return runtime, records


def fit_models(runtime: ModelRuntime, records: list[TelemetryRecord], version: int) -> None:
    """Fit and apply TTFT and TPOT models for each pool of ``records`` as the trainer does (its default target
    transform: log latency); a model the runtime's probe rejects is refitted with another seed, and if none passes
    the previous version serves."""
    for pool_key in sorted({r.pool_key for r in records}):
        for target in ("ttft", "tpot"):
            rows = [r for r in records if r.pool_key == pool_key and target_value(r, target) is not None]
            _fit(runtime, rows, pool_key, target, version)


def _fit(runtime: ModelRuntime, rows: list[TelemetryRecord], pool_key: str, target: str, version: int) -> None:
    y = np.array([target_value(r, target) for r in rows])
    for seed in range(5):
        params = TrainParams(seed=seed)
        data = xgboost.DMatrix(records_matrix(rows), label=training_target(y, params.target_transform))
        booster = xgboost.train(params.booster_params(), data, params.n_trees)
        booster.set_attr(**{TRANSFORM_ATTRIBUTE: params.target_transform})
        result = runtime.apply_update(make_update(
            model=model_bytes(booster), version=version, pool_key=pool_key, target=target,
            objective="mean", quantile=None, feature_schema=FEATURE_SCHEMA, model_format="ubj",
            created_at=time.time(), window_stats={"rows": len(rows)}, holdout_metrics={},
            output_transform=params.target_transform))
        if result.outcome.value == "applied":
            break
        print(f"# {pool_key} {target} v{version} seed {seed} rejected: {result.reason} {result.detail}",
              file=sys.stderr)
    if runtime.version(pool_key, target, "mean") is None:
        raise RuntimeError(f"no {pool_key} {target} model passed the runtime's checks")


def variant(spec: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``NAME=JSON`` → (name, pipeline or {}, overlays): JSON ``{"pipeline": PATH, "overlays": {...}}`` or
    just the overlays (plugin name or type → parameters)."""
    name, _, text = spec.partition("=")
    data = json.loads(text or "{}")
    if "pipeline" in data or "overlays" in data:
        pipeline = yaml.safe_load(Path(data["pipeline"]).read_text()) if "pipeline" in data else {}
        return name, pipeline.get("scheduling", pipeline), data.get("overlays", {})
    return name, {}, data


def measure(requests: Sequence[SimRequest], result: RunResult, slo: tuple[float, float]) -> tuple[float, ...]:
    served = result.outcomes
    span = max(o.completion_s for o in served) - min(r.arrival_s for r in requests)
    ttfts = [o.ttft_ms for o in served]
    tpots = [t for o in served if (t := o.tpot_ms) is not None]
    ttft_ok = [o.ttft_ms <= slo[0] for o in served]
    tpot_ok = [o.tpot_ms is None or o.tpot_ms <= slo[1] for o in served]
    met = sum(a and b for a, b in zip(ttft_ok, tpot_ok))
    n = len(requests)
    return (quantile(ttfts, 0.5), float(np.mean(ttfts)), quantile(ttfts, 0.99), quantile(tpots, 0.99),
            met / n, sum(ttft_ok) / n, sum(tpot_ok) / n, met / span, len(served) / n)


def arguments(description: str) -> argparse.ArgumentParser:
    """The options of a routing-quality run: the load, the SLO, the training and the policies."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--trace", default="azure", help="A trace file, a shared trace (azure, mooncake) or a "
                                                         "synthetic load spec (e.g. code:burst_factor=8).")
    parser.add_argument("--format", choices=("azure", "mooncake", "synthetic"), help="Default: from --trace.")
    parser.add_argument("--requests", type=int, default=3000, help="Requests evaluated (and trained on).")
    parser.add_argument("--load-seed", type=int, default=0, help="Seed of the load (synthetic draws, prefixes).")
    parser.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    parser.add_argument("--slo-tpot-ms", type=float, default=50.0)
    parser.add_argument("--loads", default="0.5,1,1.5,2", help="Evaluation loads, multiples of pool capacity.")
    parser.add_argument("--train-loads", help="Training loads (default: the evaluation loads).")
    parser.add_argument("--sheddable", type=float, default=0.0, help="Share of sheddable requests.")
    parser.add_argument("--baselines", default=",".join(BASELINES))
    parser.add_argument("--variant", action="append", default=[], help="NAME=JSON: another headroom pipeline.")
    parser.add_argument("--variants-without-slo", action="store_true",
                        help="Run each variant without SLOs too, as NAME no-SLO.")
    parser.add_argument("--pool-slo", action="store_true",
                        help="Hold headroom's requests to the pipeline's defaultSLO instead of sending SLO headers.")
    parser.add_argument("--no-oracle", action="store_true")
    return parser


@dataclass(frozen=True)
class Setup:
    """A run's trained state: the workload, its capacity and loads, and the models trained on it."""
    slo: tuple[float, float]  # TTFT and TPOT SLO, ms
    work: Workload
    capacity: float  # req/s per server
    loads: list[float]
    train_loads: list[float]
    records: list[TelemetryRecord]
    predictor: EmbeddedPredictor
    lengths: list[int]  # the streams' output lengths a router that ran before has seen


def prepare(args: argparse.Namespace) -> Setup:
    """Train the models as :func:`train_runtime` does, at the training loads of ``args``."""
    slo = (args.slo_ttft_ms, args.slo_tpot_ms)
    work = Workload(args.trace, args.format, args.requests, args.load_seed, args.sheddable)
    capacity = capacity_rps(work.slices(None)[0])
    loads = [float(x) for x in args.loads.split(",")]
    train_loads = [float(x) for x in args.train_loads.split(",")] if args.train_loads else loads
    runtime, records = train_runtime(work, capacity, train_loads, slo)
    lengths = [r.output_tokens for r in records if r.stream][-1000:]
    return Setup(slo, work, capacity, loads, train_loads, records, EmbeddedPredictor(runtime), lengths)


def policies(args: argparse.Namespace, slo: tuple[float, float] | None, predictor: LatencyPredictor,
             include_no_slo: bool = True) -> list[tuple[str, Factory, bool]]:
    """(name, seed → pick function, deterministic) of every policy ``args`` asks for, ``headroom no-SLO``
    included unless not ``include_no_slo``. Headroom's requests carry ``slo`` (None: each its own)."""
    chosen: list[tuple[str, Factory, bool]] = [(name, *BASELINES[name]) for name in args.baselines.split(",") if name]
    pool_slo = {"ttftMs": slo[0], "tpotMs": slo[1]} if args.pool_slo and slo else None
    headers = None if args.pool_slo else slo

    def ours(seed: int, pipeline: dict[str, Any] | None = None,
             overlays: dict[str, Any] | None = None) -> PickFunction:
        config = {**(pipeline or DEFAULT_PIPELINE), **({"defaultSLO": pool_slo} if pool_slo else {})}
        return headroom(predictor, headers, seed, config, overlays)

    chosen.append(("headroom", ours, False))
    if include_no_slo:
        chosen.append(("headroom no-SLO", lambda seed: headroom(predictor, None, seed), False))
    for name, pipeline, overlays in map(variant, args.variant):
        chosen.append((name, partial(ours, pipeline=pipeline, overlays=overlays), False))
        if getattr(args, "variants_without_slo", False):  # a router_quality option only
            chosen.append((f"{name} no-SLO", partial(headroom, predictor, None, pipeline=pipeline or None,
                                                     overlays=overlays), False))
    if not args.no_oracle:
        chosen.append(("oracle", oracle, True))
    return chosen


def main() -> int:
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1, help="Seeds 0..N-1 of pickers and simulator.")
    args = parser.parse_args()
    started = time.time()
    setup = prepare(args)
    slo = setup.slo
    print(f"# {args.trace}: capacity {setup.capacity:.2f} req/s per server; trained at loads {setup.train_loads} "
          f"on {len(setup.records)} records, ready in {time.time() - started:.0f} s; "
          f"load average {os.getloadavg()[0]:.1f}",
          flush=True)
    chosen = policies(args, setup.slo, setup.predictor)
    print("| policy | load | TTFT p50 | TTFT mean | TTFT p99 | TPOT p99 | SLO attainment | TTFT-only | TPOT-only "
          "| goodput/s | served |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    summary: list[tuple[float, dict[str, np.ndarray]]] = []
    for load in setup.loads:
        _, requests = setup.work.slices(load * SERVERS * setup.capacity)
        results: dict[str, np.ndarray] = {}
        for name, make, deterministic in chosen:
            runs = [measure(requests, run(requests, uniform_pool(SERVERS), make(seed), seed=seed,
                                          lengths=setup.lengths), slo)
                    for seed in range(1 if deterministic else args.seeds)]
            mean = results[name] = np.mean(runs, axis=0)
            low, high = min(r[4] for r in runs), max(r[4] for r in runs)
            spread = f" ({low:.3f}–{high:.3f})" if len(runs) > 1 else ""
            print(f"| {name} | {load:g} | {mean[0]:.0f} | {mean[1]:.0f} | {mean[2]:.0f} | {mean[3]:.1f} | "
                  f"{mean[4]:.3f}{spread} | {mean[5]:.3f} | {mean[6]:.3f} | {mean[7]:.1f} | {mean[8]:.3f} |",
                  flush=True)
        summary.append((load, results))
    print_summary(summary, [p[0] for p in chosen if p[0] in BASELINES])
    print(f"\n# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: done in {time.time() - started:.0f} s; "
          f"load average {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


def print_summary(summary: list[tuple[float, dict[str, np.ndarray]]], baselines: list[str]) -> None:
    print("\n| load | best baseline | its attainment / p99 TTFT | headroom | Δ attainment | p99 TTFT vs best "
          "| oracle |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for load, results in summary:
        if not baselines or "headroom" not in results:
            continue
        best = max(baselines, key=lambda b: (round(results[b][4], 3), -results[b][2]))
        ours, theirs = results["headroom"], results[best]
        oracle_cell = f"{results['oracle'][4]:.3f}" if "oracle" in results else "–"
        print(f"| {load:g} | {best} | {theirs[4]:.3f} / {theirs[2]:.0f} | {ours[4]:.3f} / {ours[2]:.0f} | "
              f"{100 * (ours[4] - theirs[4]):+.1f} pt | {100 * (ours[2] / theirs[2] - 1):+.0f}% | {oracle_cell} |")


if __name__ == "__main__":
    sys.exit(main())
