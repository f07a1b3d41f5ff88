"""Accuracy benchmark: the pipeline's models on simulator telemetry from the shared traces, scored online.

The simulator (``sim``) replays a trace on a pool of calibrated servers routed by the composite heuristic.
The telemetry then flows, in completion order, through the worker's own ingest path (validation, strata,
capped and aged windows) and training rounds (holdout, fit, promotion gate) every ``--interval`` seconds
of event time, exactly as in ``headroom worker``. Every record is first predicted by the models live at
its completion (prequential evaluation: what a router would have got), so each prediction is on data the
model has never seen. Usage: ``python -m headroom.benchmarks.pipeline_accuracy --trace azure --load 0.7``;
``--target-transform identity`` trains on milliseconds instead of log milliseconds (the reference's way);
``--calibration-fraction 0`` leaves quantile models uncalibrated; ``--no-refit`` publishes promoted candidates
as fitted, without their holdout rows. The worker's ``HEADROOM_*`` settings (e.g. ``HEADROOM_WINDOW_MAX_ROWS``)
apply.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable, Sequence

import numpy as np

from headroom.contract.features import records_matrix
from headroom.contract.model_update import OUTPUT_TRANSFORMS
from headroom.contract.settings import from_env
from headroom.contract.targets import PREDICTED, TARGETS, target_value
from headroom.contract.telemetry import TelemetryRecord, encode
from headroom.sim.capacity import capacity_rps
from headroom.sim.policies import policy
from headroom.sim.pool import run, uniform_pool
from headroom.sim.traces import load_azure, load_mooncake
from headroom.streams.ingest import Ingestor
from headroom.streams.settings import PipelineSettings
from headroom.streams.windows import Windows
from headroom.trainer.drift import ErrorDriftDetector
from headroom.trainer.evaluation import score
from headroom.trainer.fit import predict
from headroom.trainer.live import LiveModels, live_model
from headroom.trainer.params import TrainParams
from headroom.trainer.policy import RetrainPolicy
from headroom.trainer.rounds import RoundSpec, train_round

LOADERS = {"azure": load_azure, "mooncake": load_mooncake}


def simulate(trace: str, load: float, servers: int, limit: int, seed: int) -> list[TelemetryRecord]:
    loader = LOADERS[trace]
    capacity = capacity_rps(loader(limit=500)) * servers
    requests = loader(rate=load * capacity, limit=limit, stream_fraction=0.8, seed=seed)
    return run(requests, uniform_pool(servers), policy("composite", seed), seed=seed).records


@dataclasses.dataclass
class Prequential:
    scored: dict[tuple[str, str], tuple[list[float], list[float]]]  # (target, objective) -> actual, predicted
    drifts: list[tuple[float, str]]  # (event time, target) of each drift detection
    rounds: int
    round_seconds: float
    promoted: int


def prequential(records: list[TelemetryRecord], settings: PipelineSettings, train_params: Sequence[TrainParams],
                round_spec: RoundSpec, interval: float,
                learned: Callable[[TelemetryRecord], bool] = lambda record: True,
                carry_predictions: bool = False) -> Prequential:
    """Every record is predicted by the models live at its completion; then the ``learned`` ones go through
    the worker's ingest path, and a training round runs every ``interval`` seconds of event time. With
    ``carry_predictions`` each record carries the live mean models' predictions, as a router using them
    would send it, so the worker's drift detectors see their errors."""
    ingestor = Ingestor(Windows(settings.limits), lambda w: RetrainPolicy(settings.rule, ErrorDriftDetector()))
    live = LiveModels()
    pool_key = records[0].pool_key
    out = Prequential({}, [], 0, 0.0, 0)
    start = records[0].completion_ts
    chunks: dict[int, list[TelemetryRecord]] = {}
    for record in records:
        chunks.setdefault(int((record.completion_ts - start) // interval), []).append(record)
    offset = 0
    for index in sorted(chunks):
        chunk = chunks[index]
        features = records_matrix(chunk)
        for target in TARGETS:
            observed = [(i, value) for i, r in enumerate(chunk) if (value := target_value(r, target)) is not None]
            rows = [i for i, _ in observed]
            for objective in ("mean", "quantile"):
                model = live.get(pool_key, target, objective)
                if model is None or model.booster is None or not rows:
                    continue
                actual, predicted = out.scored.setdefault((target, objective), ([], []))
                actual.extend(value for _, value in observed)
                values = predict(model.booster, features[rows]).tolist()
                predicted.extend(values)
                if carry_predictions and objective == "mean":
                    for i, value in zip(rows, values):
                        chunk[i] = dataclasses.replace(chunk[i], **{PREDICTED[target]: value})
        for record in chunk:
            if learned(record):
                result = ingestor.ingest(encode(record), 0, offset)
                out.drifts += [(record.completion_ts, window[1]) for window in result.drifted]
                offset += 1
        for target in TARGETS:
            samples = ingestor.windows.samples((pool_key, target))
            if len(samples) < settings.min_samples:
                continue
            began = time.perf_counter()
            for outcome in train_round(pool_key, target, samples, live, train_params,
                                       round_spec, now=time.time()):
                if outcome.update is not None:
                    live.offer(live_model(outcome.update, outcome.booster))
                    out.promoted += 1
            out.rounds += 1
            out.round_seconds += time.perf_counter() - began
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", choices=sorted(LOADERS), default="azure")
    parser.add_argument("--load", type=float, default=0.7, help="offered load as a fraction of pool capacity")
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--requests", type=int, default=12_000)
    parser.add_argument("--interval", type=float, default=10.0, help="event-time seconds between retrains")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target-transform", choices=OUTPUT_TRANSFORMS, default="log",
                        help="what the models learn: log milliseconds (default) or milliseconds")
    parser.add_argument("--calibration-fraction", type=float, default=RoundSpec.calibration_fraction,
                        help="newest share of training rows that calibrates quantile models (0: off)")
    parser.add_argument("--no-refit", action="store_true",
                        help="publish promoted candidates as fitted instead of refitted on train + holdout rows")
    args = parser.parse_args()

    records = sorted(simulate(args.trace, args.load, args.servers, args.requests, args.seed),
                     key=lambda r: r.completion_ts)
    settings = from_env(PipelineSettings)  # the worker's HEADROOM_* settings apply here too
    train_params = [dataclasses.replace(p, target_transform=args.target_transform) for p in settings.train_params]
    round_spec = dataclasses.replace(settings.round_spec, calibration_fraction=args.calibration_fraction,
                                     refit_promoted=not args.no_refit)
    outcome = prequential(records, settings, train_params, round_spec, args.interval)
    rounds, round_seconds, promoted, scored = outcome.rounds, outcome.round_seconds, outcome.promoted, outcome.scored
    start = records[0].completion_ts
    print(f"{args.trace} at {args.load:.0%} load on {args.servers} servers, {args.target_transform} target, "
          f"calibration fraction {args.calibration_fraction:g}, {'no refit' if args.no_refit else 'refit'}: "
          f"{len(records)} records over "
          f"{records[-1].completion_ts - start:.0f} s; mean waiting queue "
          f"{np.mean([r.num_waiting for r in records]):.2f}, mean KV {np.mean([r.kv_cache_usage for r in records]):.2f}; "
          f"{rounds} rounds ({round_seconds / max(rounds, 1):.2f} s each), {promoted} promotions")
    for (target, objective), (actual, predicted) in sorted(scored.items()):
        m = score(np.array(actual), np.array(predicted), settings.quantile)
        line = f"  {target:4s} {objective:8s} {m.rows:6d} predictions: "
        if objective == "mean":
            line += f"MAE {m.mae:9.2f} ms  MAPE {100 * m.mape:5.1f}%"
        else:
            line += f"p{round(100 * settings.quantile)} coverage {m.coverage:.3f}"
        print(line + f"  (observed median {np.median(actual):.1f} ms)")


if __name__ == "__main__":
    main()
