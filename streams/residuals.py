"""Live residuals: how far the prediction the router used was from what happened.

>>> from contract.telemetry import TelemetryRecord
>>> r = residual(150.0, 100.0)
>>> (r.error, round(r.relative, 3))
(50.0, 0.333)
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.features import predicted_value, target_value
from contract.telemetry import TelemetryRecord
from trainer.drift import relative_error


@dataclass(frozen=True)
class Residual:
    actual: float
    predicted: float
    error: float  # actual - predicted, ms
    relative: float  # clipped relative error in [0, 1], what drift detectors see


def residual(actual: float, predicted: float) -> Residual:
    return Residual(actual, predicted, actual - predicted, relative_error(actual, predicted))


def record_residual(record: TelemetryRecord, target: str) -> Residual | None:
    """The residual of ``target`` when the record trains it and carries the prediction used, else None."""
    actual = target_value(record, target)
    predicted = predicted_value(record, target)
    if actual is None or predicted is None:
        return None
    return residual(actual, predicted)
