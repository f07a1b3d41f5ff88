"""weighted-random-picker: picks one candidate at random with probability proportional to its score.

Reads the engine's scores (already clamped to [0, 1]) and draws from ``context.rng`` with probability
proportional to ``score ** sharpness``. When every score is 0, picks uniformly, so a request is never
left without a server.

Parameters:
    sharpness (1.0): exponent on the scores; 1 is the reference (proportional to score), larger values
        favour the best candidates more strongly while still spreading load.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from headroom.router.framework.candidate_set import score_column
from headroom.router.framework.params import build_params, check_range
from headroom.router.framework.roles import Context, Scored

TYPE = "weighted-random-picker"


@dataclass(frozen=True)
class Params:
    sharpness: float = 1.0

    def __post_init__(self) -> None:
        check_range("sharpness", self.sharpness, 0.1, 64.0)


@dataclass(frozen=True)
class WeightedRandomPicker:
    name: str
    params: Params = Params()

    def pick(self, scored: Sequence[Scored], context: Context) -> Scored:
        if not len(scored):
            raise ValueError("cannot pick from no candidates")
        scores = score_column(scored)
        weights = np.where(scores > 0.0, scores, 0.0)  # negatives and NaN weigh nothing
        if self.params.sharpness != 1.0:
            weights = weights ** self.params.sharpness
        cumulative = np.cumsum(weights)
        total = float(cumulative[-1])
        if total <= 0:
            return scored[context.rng.randrange(len(scored))]
        index = int(np.searchsorted(cumulative, context.rng.random() * total, side="right"))
        return scored[min(index, len(scored) - 1)]


def build(name: str, raw: Mapping[str, Any] | None = None) -> WeightedRandomPicker:
    return WeightedRandomPicker(name, build_params(Params, raw, name))
