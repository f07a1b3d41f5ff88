"""XGBoost hyperparameters (the reference values of SPEC §3 by default), objectives and the transform
of the training target.

``target_transform="log"`` (the default) trains on the logarithm of the latency: the squared error of a
log is a relative error, which is what MAPE scores, whereas squared error in milliseconds is dominated by
the largest latencies (a 2 s prefill outweighs a thousand 20 ms ones). A mean model then estimates the
mean of the log latency (a geometric mean, close to the median); a quantile model's quantile is exact,
as the transform is monotone. ``"identity"`` trains on milliseconds, as the reference does.

>>> TrainParams().booster_params()["objective"]
'reg:squarederror'
>>> TrainParams(objective="quantile").booster_params()["quantile_alpha"]
0.9
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contract.model_update import OBJECTIVES, OUTPUT_TRANSFORMS


@dataclass(frozen=True)
class TrainParams:
    objective: str = "mean"  # "mean" (squared error) or "quantile" (pinball loss at `quantile`)
    quantile: float = 0.9
    target_transform: str = "log"  # one of contract.model_update.OUTPUT_TRANSFORMS
    n_trees: int = 200
    max_depth: int = 6
    learning_rate: float = 0.05
    subsample: float = 0.8
    colsample_bytree: float = 0.8
    min_child_weight: float = 5.0
    gamma: float = 0.2
    alpha: float = 0.01
    reg_lambda: float = 0.1
    tree_method: str = "hist"
    threads: int = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective {self.objective!r} is not one of {OBJECTIVES}")
        if self.target_transform not in OUTPUT_TRANSFORMS:
            raise ValueError(f"target transform {self.target_transform!r} is not one of {OUTPUT_TRANSFORMS}")
        if not 0.0 < self.quantile < 1.0:
            raise ValueError(f"quantile must be within (0, 1), got {self.quantile}")
        if self.n_trees < 1 or self.max_depth < 1 or self.threads < 1:
            raise ValueError(f"n_trees, max_depth and threads must be positive, got "
                             f"{self.n_trees}, {self.max_depth}, {self.threads}")

    def booster_params(self) -> dict[str, Any]:
        """The parameter dict ``xgboost.train`` takes (the tree count is passed separately)."""
        params: dict[str, Any] = {
            "max_depth": self.max_depth, "eta": self.learning_rate, "subsample": self.subsample,
            "colsample_bytree": self.colsample_bytree, "min_child_weight": self.min_child_weight,
            "gamma": self.gamma, "alpha": self.alpha, "lambda": self.reg_lambda,
            "tree_method": self.tree_method, "nthread": self.threads, "seed": self.seed,
        }
        if self.objective == "mean":
            params["objective"] = "reg:squarederror"
        else:
            params["objective"] = "reg:quantileerror"
            params["quantile_alpha"] = self.quantile
        return params
