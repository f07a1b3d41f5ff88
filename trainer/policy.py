"""When a model is due for retraining: periodically once enough samples exist, and at once on drift.

A :class:`RetrainPolicy` holds the drift detector of one (pool key, target) and the time of its last
training; callers pass the clock in, so the rules are pure.

>>> policy = RetrainPolicy(RetrainRule(interval_s=10, min_samples=100), ErrorDriftDetector())
>>> policy.due(now=0.0, window_rows=50) is None, policy.due(now=0.0, window_rows=100)
(True, 'first')
>>> policy.trained(now=0.0); policy.admitted(5); policy.due(now=5.0, window_rows=105) is None
True
>>> policy.due(now=10.0, window_rows=105)
'periodic'
"""

from __future__ import annotations

from dataclasses import dataclass

from headroom.trainer.drift import ErrorDriftDetector


@dataclass(frozen=True)
class RetrainRule:
    interval_s: float = 10.0  # periodic retraining interval
    min_samples: int = 100  # no training below this many window rows
    drift_cooldown_s: float = 2.0  # at most one drift-triggered retraining per this many seconds
    drift_retries: int = 3  # drift-triggered retrainings to try while none gets promoted


class RetrainPolicy:
    def __init__(self, rule: RetrainRule, detector: ErrorDriftDetector):
        self.rule = rule
        self.detector = detector
        self.last_trained_at: float | None = None
        self.admitted_since_training = 0
        self.drift_reason: str | None = None
        self._drift_attempts = 0

    def admitted(self, rows: int = 1) -> None:
        """Count rows admitted to the window since the last training."""
        self.admitted_since_training += rows

    def observe(self, error: float, residuals_label: str = "relative error") -> bool:
        """Feed one live prediction error to the detector; True when it detected drift just now."""
        if not self.detector.update(error):
            return False
        self._drift_attempts = 0
        self.drift_reason = (f"{self.detector.kind} detected drift in {residuals_label} after "
                             f"{self.detector.updates} residuals (recent mean {self.detector.recent_error:.3f})")
        return True

    def due(self, now: float, window_rows: int) -> str | None:
        """``"first"``, ``"drift"`` or ``"periodic"`` when a retraining is due now, else None."""
        if window_rows < self.rule.min_samples:
            return None
        if self.last_trained_at is None:
            return "first"
        since = now - self.last_trained_at
        if self.drift_reason is not None and since >= self.rule.drift_cooldown_s:
            return "drift"
        if since >= self.rule.interval_s and self.admitted_since_training > 0:
            return "periodic"
        return None

    def unanswered(self, reason: str) -> None:
        """A drift-triggered training promoted nothing: try again after the cooldown, a few times. When the
        detector fired again while that training ran, the newer drift stands, with retries of its own."""
        if self.drift_reason is not None:
            return
        self._drift_attempts += 1
        if self._drift_attempts < self.rule.drift_retries:
            self.drift_reason = reason

    def trained(self, now: float) -> str | None:
        """Record a training at ``now``; returns the drift reason it answered, if any."""
        reason, self.drift_reason = self.drift_reason, None
        self.last_trained_at = now
        self.admitted_since_training = 0
        return reason
