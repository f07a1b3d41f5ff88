"""Where a training round's time goes: CPU seconds of one fit, by window size, through ``xgboost.train`` and
through :func:`trainer.fit.fit`, interleaved.

    .venv/bin/python -m headroom.benchmarks.dev.training_fit [--rows 300,1500,3000] [--repeats 5]

Each fit is the worker's (the reference hyperparameters: 200 trees of depth 6, a log target) on the first
``rows`` TTFT samples of synthetic telemetry (``tests/trainer/synthetic.py``). A round fits a model 3 times (the mean candidate, the
quantile candidate and its calibration probe) and 6 times when it promotes both (each refitted on all rows).
Prints the best CPU time of ``--repeats`` of each, and that the two make the same model bytes.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xgboost

from headroom.contract.features import FEATURE_NAMES, training_features
from headroom.contract.model_update import TRANSFORM_ATTRIBUTE
from headroom.trainer.fit import fit, model_bytes, training_target
from headroom.trainer.params import TrainParams
from headroom.trainer.samples import Samples
from tests.trainer.synthetic import samples_of, synthetic_records


def with_train(samples: Samples, params: TrainParams) -> xgboost.Booster:
    """The fit as it was: ``xgboost.train`` on a matrix with feature names."""
    matrix = xgboost.DMatrix(training_features(samples.features(), "ttft"),
                             label=training_target(samples.values, params.target_transform),
                             feature_names=list(FEATURE_NAMES))
    booster = xgboost.train(params.booster_params(), matrix, num_boost_round=params.n_trees)
    booster.set_attr(**{TRANSFORM_ATTRIBUTE: params.target_transform})
    return booster


def best_cpu(make: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        began = time.process_time()
        make()
        best = min(best, time.process_time() - began)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="300,1500,3000")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    params = TrainParams()
    records = synthetic_records(2 * max(int(n) for n in args.rows.split(",")), seed=11)
    print(f"# load average before: {Path('/proc/loadavg').read_text().split()[:3]}")
    print("| window rows | xgboost.train CPU-s | trainer.fit CPU-s | saved | same bytes |")
    print("|---:|---:|---:|---:|---|")
    for rows in (int(n) for n in args.rows.split(",")):
        samples = samples_of(records, "ttft").take(np.arange(rows))
        old = best_cpu(lambda: with_train(samples, params), args.repeats)  # noqa: B023
        new = best_cpu(lambda: fit(samples, params, "ttft"), args.repeats)  # noqa: B023
        same = model_bytes(with_train(samples, params)) == model_bytes(fit(samples, params, "ttft"))
        print(f"| {rows:,} | {old:.3f} | {new:.3f} | {1 - new / old:.0%} | {same} |")
    print(f"# load average after: {Path('/proc/loadavg').read_text().split()[:3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
