"""max-score-picker: picks the candidate with the highest score, breaking ties at random.

Reads the engine's scores (already clamped to [0, 1]). Candidates within ``tieTolerance`` of the best
score are tied, and one of them is drawn uniformly from ``context.rng`` (as the reference's max-score
picker shuffles before it picks), so equal servers share the load instead of the first one taking it all.

Parameters:
    tieTolerance (0.0): scores this close to the best count as equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from headroom.router.framework.candidate_set import score_column
from headroom.router.framework.params import build_params, check_range
from headroom.router.framework.roles import Context, Scored

TYPE = "max-score-picker"


@dataclass(frozen=True)
class Params:
    tie_tolerance: float = 0.0

    def __post_init__(self) -> None:
        check_range("tie_tolerance", self.tie_tolerance, 0.0, 1.0)


@dataclass(frozen=True)
class MaxScorePicker:
    name: str
    params: Params = Params()

    def pick(self, scored: Sequence[Scored], context: Context) -> Scored:
        if not len(scored):
            raise ValueError("cannot pick from no candidates")
        scores = score_column(scored)
        if not np.isfinite(scores).all():  # NaN is no score; infinities as the largest and smallest floats
            scores = np.nan_to_num(scores, nan=-np.inf)
        values = scores.tolist()  # a few candidates: Python floats compare faster than array calls
        floor = max(values) - self.params.tie_tolerance
        best = [i for i, score in enumerate(values) if score >= floor]
        return scored[best[context.rng.randrange(len(best))] if len(best) > 1 else best[0]]


def build(name: str, raw: Mapping[str, Any] | None = None) -> MaxScorePicker:
    return MaxScorePicker(name, build_params(Params, raw, name))
