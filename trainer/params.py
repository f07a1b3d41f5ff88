"""XGBoost hyperparameters (the reference values of SPEC §3 by default), objectives and the transform
of the training target.

``target_transform="log"`` (the default) trains on the logarithm of the latency: the squared error of a
log is a relative error, which is what MAPE scores, whereas squared error in milliseconds is dominated by
the largest latencies (a 2 s prefill outweighs a thousand 20 ms ones). A mean model then estimates the
mean of the log latency (a geometric mean, close to the median); a quantile model's quantile is exact,
as the transform is monotone. ``"identity"`` trains on milliseconds, as the reference does.

``central_loss`` is the loss of the "mean" (central) models: ``"squared"`` (the reference's, a mean) or
``"absolute"`` (a median; log residuals are skewed to the right, so on a log target the median sits below the
geometric mean and scores a lower MAPE).

>>> TrainParams().booster_params()["objective"]
'reg:squarederror'
>>> TrainParams(objective="quantile").booster_params()["quantile_alpha"]
0.9
>>> TrainParams(central_loss="absolute").booster_params()["objective"]
'reg:absoluteerror'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headroom.contract.model_update import OBJECTIVES, OUTPUT_TRANSFORMS

CENTRAL_LOSSES = {"squared": "reg:squarederror", "absolute": "reg:absoluteerror"}


@dataclass(frozen=True)
class TrainParams:
    objective: str = "mean"  # "mean" (squared error) or "quantile" (pinball loss at `quantile`)
    quantile: float = 0.9
    target_transform: str = "log"  # one of contract.model_update.OUTPUT_TRANSFORMS
    central_loss: str = "squared"  # of "mean" models: one of CENTRAL_LOSSES
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
        if self.central_loss not in CENTRAL_LOSSES:
            raise ValueError(f"central loss {self.central_loss!r} is not one of {tuple(CENTRAL_LOSSES)}")
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
            params["objective"] = CENTRAL_LOSSES[self.central_loss]
        else:
            params["objective"] = "reg:quantileerror"
            params["quantile_alpha"] = self.quantile
        return params
