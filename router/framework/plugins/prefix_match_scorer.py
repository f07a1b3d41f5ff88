"""prefix-match-scorer: a heuristic scorer; a larger cached share of the prompt scores higher.

Reads each server's ``prefix_match`` (0-1) and uses it as the score. Part of the composite heuristic
profile.

Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from headroom.router.framework.candidate_set import CandidateSet
from headroom.router.framework.params import build_params
from headroom.router.framework.roles import Candidate, Request

TYPE = "prefix-match-scorer"


@dataclass(frozen=True)
class Params:
    pass


@dataclass(frozen=True)
class PrefixMatchScorer:
    name: str
    params: Params = Params()

    def score(self, request: Request, candidates: Sequence[Candidate]) -> np.ndarray:
        return CandidateSet.of(candidates).server_column("prefix_match").copy()


def build(name: str, raw: Mapping[str, Any] | None = None) -> PrefixMatchScorer:
    return PrefixMatchScorer(name, build_params(Params, raw, name))
