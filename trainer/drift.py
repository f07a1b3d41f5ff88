"""Drift detectors on prediction error, in River's vocabulary: ``update(error)`` then ``drift_detected``.

The error fed in is the clipped relative error of a live prediction (see :func:`relative_error`): it is
dimensionless and bounded in [0, 1], so one setting works for TTFT in seconds and TPOT in milliseconds.
ADWIN (the default) fires when the mean of its adaptive window changes; Page-Hinkley fires when the
cumulative deviation from the running mean exceeds ``threshold`` (in units of relative error).

>>> import random
>>> rng = random.Random(7)
>>> detector = ErrorDriftDetector("adwin")
>>> fired = [i for i in range(2000) if detector.update(abs(rng.gauss(0.05 if i < 1000 else 0.5, 0.03)))]
>>> 1000 <= fired[0] < 1100
True
"""

from __future__ import annotations

from typing import Protocol

DETECTORS = ("adwin", "page-hinkley")
RELATIVE_ERROR_FLOOR_MS = 1.0
RECENT_WEIGHT = 0.05


class Detector(Protocol):
    """What this module uses of a River drift detector."""

    def update(self, x: float) -> object: ...

    @property
    def drift_detected(self) -> bool: ...


def relative_error(actual: float, predicted: float) -> float:
    """``|actual - predicted| / actual`` (actual floored at 1 ms), clipped to at most 1."""
    return min(abs(actual - predicted) / max(actual, RELATIVE_ERROR_FLOOR_MS), 1.0)


class ErrorDriftDetector:
    """One River detector over a stream of relative errors, counting what it has seen."""

    def __init__(self, kind: str = "adwin", *, adwin_delta: float = 0.002, ph_threshold: float = 5.0,
                 ph_delta: float = 0.005, ph_min_instances: int = 30):
        from river import drift  # here, not at import: River loads SciPy, a second that every command would pay

        self._detector: Detector
        if kind == "adwin":
            self._detector = drift.ADWIN(delta=adwin_delta)
        elif kind == "page-hinkley":
            self._detector = drift.PageHinkley(min_instances=ph_min_instances, delta=ph_delta,
                                               threshold=ph_threshold, mode="both")
        else:
            raise ValueError(f"unknown drift detector {kind!r}; expected one of {DETECTORS}")
        self.kind = kind
        self.updates = 0
        self.detections = 0
        self.recent_error = 0.0  # exponentially weighted mean of the latest errors, for reports

    def update(self, error: float) -> bool:
        """Feed one error; True when this update detected drift."""
        self._detector.update(error)
        self.updates += 1
        self.recent_error += RECENT_WEIGHT * (error - self.recent_error) if self.updates > 1 else error - self.recent_error
        if self._detector.drift_detected:
            self.detections += 1
            return True
        return False

    @property
    def drift_detected(self) -> bool:
        return self._detector.drift_detected

