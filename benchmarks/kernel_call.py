"""Wall time of one call of the compiled tree walk: two 200-tree depth-6 forests over 100 and over 8 rows.

    python -m headroom.benchmarks.kernel_call [--calls 200]

The forests are random (the walk's cost does not depend on what the trees learned, only on their shape).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from headroom.contract.features import FEATURE_NAMES
from headroom.predictor.forest import Forest
from headroom.predictor.kernels import ForestStack, evaluate


def random_forest(rng: np.random.Generator, trees: int = 200, depth: int = 6) -> Forest:
    width, inner = len(FEATURE_NAMES), 2 ** depth - 1
    return Forest(objective="reg:squarederror", quantiles=(), n_features=width, base_score=np.float32(0.5),
                  depth=depth, features=rng.integers(0, width, (trees, inner)).astype(np.uint32),
                  thresholds=rng.uniform(0, 1, (trees, inner)).astype(np.float32),
                  default_left=rng.integers(0, 2, (trees, inner)).astype(bool),
                  leaves=rng.normal(size=(trees, 2 ** depth)).astype(np.float32))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    stack = ForestStack.of([random_forest(rng), random_forest(rng)])
    for rows in (100, 8):
        x = rng.uniform(0, 1, (rows, len(FEATURE_NAMES))).astype(np.float32)
        evaluate(stack, x)  # warm caches before timing
        started = time.perf_counter()
        for _ in range(args.calls):
            evaluate(stack, x)
        print(f"{rows} rows: {(time.perf_counter() - started) / args.calls * 1e6:.1f} µs per call")


if __name__ == "__main__":
    main()
