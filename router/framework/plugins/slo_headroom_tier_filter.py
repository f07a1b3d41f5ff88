"""slo-headroom-tier-filter: keeps the servers predicted to meet the request's SLO.

Only acts on requests with SLO headers (others pass through). Splits candidates by predicted headroom
into a positive tier (every applicable headroom ≥ 0) and a negative tier. Keeps the positive tier,
except with probability ``epsilonExploreNeg`` it keeps the negative tier instead, so recovering servers
still get probe traffic. When either tier is empty, keeps everyone. Candidates without a prediction are
unknown, not negative: they stay with whichever tier is kept.

Parameters:
    epsilonExploreNeg (0.01): chance of sending the request to the negative tier.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from headroom.router.framework.candidate_set import CandidateSet
from headroom.router.framework.params import build_params, check_range
from headroom.router.framework.roles import Candidate, Context, Request

TYPE = "slo-headroom-tier-filter"


@dataclass(frozen=True)
class Params:
    epsilon_explore_neg: float = 0.01

    def __post_init__(self) -> None:
        check_range("epsilon_explore_neg", self.epsilon_explore_neg, 0.0, 1.0)


@dataclass(frozen=True)
class SloHeadroomTierFilter:
    name: str
    params: Params = Params()

    def filter(self, request: Request, candidates: Sequence[Candidate], context: Context) -> Sequence[Candidate]:
        if not request.has_slo:
            return candidates
        everyone = CandidateSet.of(candidates)
        known, meets = everyone.slo_verdicts()
        positive, negative = known & meets, known & ~meets
        if not positive.any() or not negative.any():
            return everyone
        eps = self.params.epsilon_explore_neg
        keep_negative = eps > 0 and context.rng.random() < eps
        kept = np.flatnonzero(negative if keep_negative else positive)
        return everyone.take(np.concatenate((kept, np.flatnonzero(~known))))


def build(name: str, raw: Mapping[str, Any] | None = None) -> SloHeadroomTierFilter:
    return SloHeadroomTierFilter(name, build_params(Params, raw, name))
