"""Holdout metrics of a model: MAE, MAPE, pinball loss and quantile coverage.

>>> import numpy as np
>>> m = score(np.array([100.0, 200.0]), np.array([110.0, 180.0]), quantile=0.9)
>>> (m.mae, round(m.mape, 3), m.coverage)
(15.0, 0.1, 0.5)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

MAPE_FLOOR_MS = 1.0  # observed values below this count as this much in MAPE


@dataclass(frozen=True)
class HoldoutMetrics:
    rows: int
    mae: float  # ms
    mape: float  # fraction
    pinball: float  # ms, at `quantile`
    coverage: float  # fraction of observations at or below the prediction
    quantile: float

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}

    def error(self, objective: str) -> float:
        """The error the promotion gate compares: MAE for mean models, pinball loss for quantile ones."""
        return self.mae if objective == "mean" else self.pinball


def score(actual: np.ndarray, predicted: np.ndarray, quantile: float = 0.9) -> HoldoutMetrics:
    """Metrics of ``predicted`` against ``actual`` (both in ms)."""
    actual = np.asarray(actual, dtype=np.float64)
    predicted = np.asarray(predicted, dtype=np.float64)
    if actual.shape != predicted.shape:
        raise ValueError(f"actual {actual.shape} and predicted {predicted.shape} differ in shape")
    if len(actual) == 0:
        nan = float("nan")
        return HoldoutMetrics(rows=0, mae=nan, mape=nan, pinball=nan, coverage=nan, quantile=quantile)
    diff = actual - predicted
    return HoldoutMetrics(
        rows=len(actual),
        mae=float(np.abs(diff).mean()),
        mape=float((np.abs(diff) / np.maximum(actual, MAPE_FLOOR_MS)).mean()),
        pinball=float(np.maximum(quantile * diff, (quantile - 1.0) * diff).mean()),
        coverage=float((actual <= predicted).mean()),
        quantile=quantile,
    )
