"""Small XGBoost models trained in the test process, and their model-update messages (signed with tests.keys.TEST_KEY)."""

from __future__ import annotations

import time

import numpy as np
import xgboost

from headroom.benchmarks.predictor import EFFECTIVE_PROMPT, candidates
from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.model_update import TRANSFORM_ATTRIBUTE, booster_transform, encode_update, make_update
from headroom.contract.probe import PROBE_ROWS, stamp
from headroom.contract.signing import SigningKey
from tests.keys import TEST_KEY

candidate_rows = candidates


def latency_ms(rows: np.ndarray, target: str, seed: int = 0) -> np.ndarray:
    """A positive synthetic latency that depends on load and prompt size."""
    rng = np.random.default_rng(seed + 1)
    base = {"ttft": 20.0, "tpot": 8.0, "e2e": 900.0}[target]
    load = 1 + 3 * rows[:, 0] + 0.2 * rows[:, 1] + 0.02 * rows[:, 2]
    return base * load + 0.01 * rows[:, EFFECTIVE_PROMPT] + rng.exponential(base * 0.2, len(rows))


def train(target: str = "ttft", objective: str = "mean", quantile: float = 0.9, seed: int = 0,
          trees: int = 20, depth: int = 4, rows: int = 600, scale: float = 1.0, log: bool = False) -> xgboost.Booster:
    """A booster fitted on synthetic milliseconds (their logarithm if ``log``, which it then declares)."""
    x = candidate_rows(rows, seed)
    y = latency_ms(x, target, seed) * scale
    params = {"max_depth": depth, "eta": 0.1, "nthread": 1, "tree_method": "hist", "seed": seed,
              "objective": "reg:squarederror"}
    if objective == "quantile":
        params.update(objective="reg:quantileerror", quantile_alpha=quantile)
    booster = xgboost.train(params, xgboost.DMatrix(x, label=np.log(y) if log else y), trees)
    if log:
        booster.set_attr(**{TRANSFORM_ATTRIBUTE: "log"})
    return booster


def message(booster: xgboost.Booster | bytes, version: int, *, pool_key: str = "pool-a", target: str = "ttft",
            objective: str = "mean", quantile: float | None = None, model_format: str = "ubj",
            feature_schema: str = FEATURE_SCHEMA, key: SigningKey | None = TEST_KEY,
            holdout_metrics: dict[str, float] | None = None, stamped: bool = True) -> bytes:
    """A model-update message signed with ``key`` (None: unsigned), its model stamped with its probe outputs as
    the trainer's are (:func:`contract.probe.stamp`) unless not ``stamped`` or it reads other features."""
    if stamped and not isinstance(booster, bytes) and booster.num_features() == PROBE_ROWS.shape[1]:
        stamp(booster)
    model = booster if isinstance(booster, bytes) else bytes(booster.save_raw(model_format))
    if objective == "quantile" and quantile is None:
        quantile = 0.9
    encoded = encode_update(make_update(
        model=model, version=version, pool_key=pool_key, target=target, objective=objective, quantile=quantile,
        feature_schema=feature_schema, model_format=model_format, created_at=time.time(),
        window_stats={"rows": 600}, holdout_metrics=holdout_metrics or {"mae": 1.0},
        output_transform="identity" if isinstance(booster, bytes) else booster_transform(booster)))
    return key.sign(encoded) if key is not None else encoded
