"""Stratified telemetry sampling at the router: accuracy and drift detection with and without it.

    .venv/bin/python -m headroom.benchmarks.telemetry_sampling [--trace azure] [--load 0.7] [--quotas 0,2,0.5] [--sampler-seed 0]

The setup of :mod:`benchmarks.pipeline_accuracy` (the trace on 4 simulated H100 servers, composite routing,
the worker's ingest path and a training round every 10 s of event time), with a regime change: at
``--change-at`` seconds every server becomes ``--slowdown`` times slower. For each per-stratum quota
(records/s; 0 sends every record) a :class:`router.control.telemetry_sampler.TelemetrySampler` decides, per
record at its completion, whether the router would send it; only those are learned from, but *every*
record is predicted by the models live at its completion and scored (what each request would have got),
and carries that prediction as a router using the models would send it. Drift: the worker's detectors see
the errors of the records sent only; the table gives their detections before the
change (false alarms) and the delay from the change to the first detection of each target.
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable

import numpy as np

from headroom.benchmarks.pipeline_accuracy import LOADERS, prequential
from headroom.contract.settings import from_env
from headroom.contract.strata import stratum_of
from headroom.contract.telemetry import TelemetryRecord
from headroom.router.control.telemetry_sampler import TelemetrySampler
from headroom.sim.capacity import capacity_rps
from headroom.sim.policies import policy
from headroom.sim.pool import run, slow_down, uniform_pool
from headroom.streams.settings import PipelineSettings
from headroom.trainer.evaluation import score

EPOCH = 1_700_000_000.0  # event time of the simulation's start


def simulate(trace: str, load: float, servers: int, limit: int, change_at: float, slowdown: float,
             seed: int) -> list[TelemetryRecord]:
    loader = LOADERS[trace]
    capacity = capacity_rps(loader(limit=500)) * servers
    requests = loader(rate=load * capacity, limit=limit, stream_fraction=0.8, seed=seed)
    pool = uniform_pool(servers)
    actions = [(change_at, slow_down(spec.server_id, slowdown)) for spec in pool]
    result = run(requests, pool, policy("composite", seed), seed=seed, actions=actions, epoch_unix=EPOCH)
    return sorted(result.records, key=lambda r: r.completion_ts)


def sent_by(quota: float, floor: float, seed: int) -> Callable[[TelemetryRecord], bool] | None:
    """The router's decision per record: None when every record is sent."""
    if quota <= 0:
        return None
    sampler = TelemetrySampler(quota_per_s=quota, floor=floor, rng=random.Random(seed))
    return lambda r: sampler.weight(stratum_of(r), r.completion_ts) is not None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", choices=sorted(LOADERS), default="azure")
    parser.add_argument("--load", type=float, default=0.7)
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--requests", type=int, default=12_000)
    parser.add_argument("--change-at", type=float, default=120.0, help="event-time seconds of the slowdown")
    parser.add_argument("--slowdown", type=float, default=1.5)
    parser.add_argument("--quotas", default="0,2,1,0.5", help="records/s per stratum; 0: every record")
    parser.add_argument("--floor", type=float, default=0.01)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=0, help="of the simulation")
    parser.add_argument("--sampler-seed", type=int, default=0, help="of the routers' sampling draws")
    args = parser.parse_args()

    records = simulate(args.trace, args.load, args.servers, args.requests, args.change_at, args.slowdown, args.seed)
    settings = from_env(PipelineSettings)
    change = EPOCH + args.change_at
    span = records[-1].completion_ts - records[0].completion_ts
    strata = len({stratum_of(r) for r in records})
    print(f"# {args.trace} at {args.load:.0%} load on {args.servers} servers: {len(records)} records over {span:.0f} s "
          f"({len(records) / span:.0f}/s) in {strata} strata; all servers {args.slowdown}x slower at "
          f"{args.change_at:.0f} s; window {settings.window_max_rows} rows per stratum, retrain every "
          f"{args.interval:g} s")
    print("| quota /s per stratum | records sent | TTFT MAPE | TPOT MAPE | E2E MAPE | TTFT p90 cov. | TPOT p90 cov. "
          "| false drifts | TTFT drift after change s | TPOT drift after change s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for quota in (float(q) for q in args.quotas.split(",")):
        decide = sent_by(quota, args.floor, args.sampler_seed)
        sent = sum(1 for r in records if decide(r)) if decide else len(records)
        decide = sent_by(quota, args.floor, args.sampler_seed)  # the same decisions again, from the start
        outcome = prequential(records, settings, settings.train_params, settings.round_spec, args.interval,
                              decide or (lambda r: True), carry_predictions=True)
        metrics = {key: score(np.array(a), np.array(p), settings.quantile) for key, (a, p) in outcome.scored.items()}
        mape = {t: f"{100 * metrics[(t, 'mean')].mape:.1f}%" if (t, "mean") in metrics else "—"
                for t in ("ttft", "tpot", "e2e")}
        coverage = {t: f"{metrics[(t, 'quantile')].coverage:.3f}" if (t, "quantile") in metrics else "—"
                    for t in ("ttft", "tpot")}
        false_drifts = sum(1 for at, _ in outcome.drifts if at < change)
        first = {t: next((f"{at - change:.1f}" for at, target in outcome.drifts if target == t and at >= change), "none")
                 for t in ("ttft", "tpot")}
        label = f"{quota:g}" if quota > 0 else "every record"
        print(f"| {label} | {sent} ({sent / len(records):.0%}) | {mape['ttft']} | {mape['tpot']} | {mape['e2e']} | "
              f"{coverage['ttft']} | {coverage['tpot']} | {false_drifts} | {first['ttft']} | {first['tpot']} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
