"""queue-scorer: a heuristic scorer; a shorter queue, relative to the other candidates, scores higher.

Reads each server's ``num_waiting``. Score = (longest - own) / (longest - shortest); when all queues
are equal every candidate scores 1. Part of the composite heuristic profile.

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

TYPE = "queue-scorer"


@dataclass(frozen=True)
class Params:
    pass


@dataclass(frozen=True)
class QueueScorer:
    name: str
    params: Params = Params()

    def score(self, request: Request, candidates: Sequence[Candidate]) -> np.ndarray:
        queues = CandidateSet.of(candidates).server_column("num_waiting")
        if not len(queues):
            return np.zeros(0)
        low, high = queues.min(), queues.max()
        if high == low:
            return np.ones(len(queues))
        scores: np.ndarray = (high - queues) / (high - low)
        return scores


def build(name: str, raw: Mapping[str, Any] | None = None) -> QueueScorer:
    return QueueScorer(name, build_params(Params, raw, name))
