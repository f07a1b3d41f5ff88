"""What the model bounds cost and save (``docs/benchmarks.md``, *Signed models within bounds*).

A reference model (200 trees of depth 6, the reference hyperparameters) and one of 3,000 such trees, signed by a
trusted key. Measured, interleaved, ``--rounds`` times each: verifying and installing the reference model
(:meth:`ModelRuntime.apply`, every check included) and the time the bound checks of its leaves and outputs take
inside that; refusing the 3,000-tree model (``trees``, counted before XGBoost writes its JSON) against
installing it under bounds that allow it; and a 64-candidate prediction with either model live.

    python -m headroom.benchmarks.model_bounds --rounds 15
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import xgboost

from headroom.benchmarks.live import load_average
from headroom.benchmarks.predictor import BENCH_KEY, REFERENCE_PARAMS, candidates
from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.model_update import ModelBounds, encode_update, make_update
from headroom.contract.signing import TrustedKeys
from headroom.predictor import runtime as runtime_module
from headroom.predictor.forest import _check_numbers
from headroom.predictor.runtime import ModelRuntime
from headroom.trainer.fit import model_bytes

P = ParamSpec("P")
T = TypeVar("T")


def signed(trees: int, version: int) -> bytes:
    rows = candidates(4000, seed=1)
    labels = 20 + 3 * rows[:, 0] * 100 + rows[:, 1]
    booster = xgboost.train({**REFERENCE_PARAMS, "objective": "reg:squarederror"}, xgboost.DMatrix(rows, label=labels),
                            trees)
    update = make_update(model=model_bytes(booster), version=version, pool_key="bench", target="ttft",
                         objective="mean", feature_schema=FEATURE_SCHEMA, model_format="ubj", created_at=time.time())
    return BENCH_KEY.sign(encode_update(update))


def timed(call: Callable[..., object], *args: object) -> float:
    started = time.perf_counter()
    call(*args)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    load = load_average()
    reference, large = signed(200, 1), signed(3000, 1)
    trust, roomy = TrustedKeys([BENCH_KEY.public_key]), TrustedKeys([BENCH_KEY.public_key],
                                                                    bounds=ModelBounds(max_trees=5000))
    spent = {"checks": 0.0}
    check_numbers, check_range = _check_numbers, runtime_module._check_range

    def counted(check: Callable[P, T]) -> Callable[P, T]:
        def wrapper(*a: P.args, **k: P.kwargs) -> T:
            started = time.perf_counter()
            try:
                return check(*a, **k)
            finally:
                spent["checks"] += time.perf_counter() - started
        return wrapper

    import headroom.predictor.forest as forest_module
    forest_module._check_numbers, runtime_module._check_range = counted(check_numbers), counted(check_range)
    rows = candidates(64, seed=2)
    samples: dict[str, list[float]] = {k: [] for k in ("apply 200", "bound checks in it", "refuse 3000",
                                                       "apply 3000 allowed", "predict 200", "predict 3000")}
    for _ in range(args.rounds):
        spent["checks"] = 0.0
        small = ModelRuntime(trust=trust)
        samples["apply 200"].append(timed(small.apply, reference))
        samples["bound checks in it"].append(spent["checks"])
        strict = ModelRuntime(trust=trust)
        samples["refuse 3000"].append(timed(strict.apply, large))
        assert strict.rejected == {"trees": 1}
        big = ModelRuntime(trust=roomy)
        samples["apply 3000 allowed"].append(timed(big.apply, large))
        assert big.applied == 1 and small.applied == 1
        for name, runtime in (("predict 200", small), ("predict 3000", big)):
            runtime.predict("bench", rows)
            samples[name].append(statistics.median(timed(runtime.predict, "bench", rows) for _ in range(50)))
    medians = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    print(json.dumps({"rounds": args.rounds, "median_ms": {k: round(v, 3) for k, v in medians.items()},
                      "bound_checks_share_of_apply": round(medians["bound checks in it"] / medians["apply 200"], 4),
                      "refuse_3000_vs_apply_3000": round(medians["refuse 3000"] / medians["apply 3000 allowed"], 4),
                      "predict_3000_vs_200": round(medians["predict 3000"] / medians["predict 200"], 2),
                      "load_average": f"{load} → {load_average()}"}, indent=1))


if __name__ == "__main__":
    main()
