"""The promotion gate: a candidate replaces the live version only if it is not worse on the same holdout.

The compared error is MAE for mean models and pinball loss for quantile models; ``tolerance`` is the
relative slack the candidate may exceed the live error by (0.02 = 2% worse still promotes). With no live
version (or one with another feature schema) the first real candidate is promoted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from headroom.trainer.evaluation import HoldoutMetrics


@dataclass(frozen=True)
class GateDecision:
    promote: bool
    reason: str
    candidate_error: float
    live_error: float | None


def decide(candidate: HoldoutMetrics, live: HoldoutMetrics | None, objective: str,
           tolerance: float) -> GateDecision:
    """Whether to promote ``candidate``; ``live`` is the live version's metrics on the same holdout."""
    if tolerance < 0:
        raise ValueError(f"gate tolerance must not be negative, got {tolerance}")
    error = candidate.error(objective)
    if candidate.rows > 0 and not math.isfinite(error):
        return GateDecision(False, f"candidate error is not finite ({error})", error,
                            None if live is None else live.error(objective))
    if live is None:
        return GateDecision(True, "first version", error, None)
    live_error = live.error(objective)
    if candidate.rows == 0:
        return GateDecision(False, "empty holdout: nothing to compare on", error, live_error)
    if not math.isfinite(live_error):
        return GateDecision(True, f"live error is not finite ({live_error})", error, live_error)
    limit = live_error * (1.0 + tolerance)
    if error <= limit:
        return GateDecision(True, f"holdout error {error:.3f} <= live {live_error:.3f} (+{tolerance:.0%})",
                            error, live_error)
    return GateDecision(False, f"holdout error {error:.3f} > live {live_error:.3f} (+{tolerance:.0%})",
                        error, live_error)
