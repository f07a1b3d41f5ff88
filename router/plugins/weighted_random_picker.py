"""weighted-random-picker: picks one candidate at random with probability proportional to its score.

Reads the engine's scores (already clamped to [0, 1]) and draws from ``context.rng`` with probability
proportional to ``score ** sharpness``. When every score is 0, picks uniformly, so a request is never
left without a server.

Parameters:
    sharpness (1.0): exponent on the scores; 1 is the reference (proportional to score), larger values
        favour the best candidates more strongly while still spreading load.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from router.params import build_params, check_range
from router.roles import Context, Scored

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
        if not scored:
            raise ValueError("cannot pick from no candidates")
        k = self.params.sharpness
        weights = (max(0.0, s.score) for s in scored) if k == 1.0 else (max(0.0, s.score) ** k for s in scored)
        cumulative = list(itertools.accumulate(weights))
        total = cumulative[-1]
        if total <= 0:
            return scored[context.rng.randrange(len(scored))]
        index = bisect.bisect_right(cumulative, context.rng.random() * total)
        return scored[min(index, len(scored) - 1)]


def build(name: str, raw: Mapping[str, Any] | None = None) -> WeightedRandomPicker:
    return WeightedRandomPicker(name, build_params(Params, raw, name))
