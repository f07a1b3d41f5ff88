"""queue-scorer: a heuristic scorer; a shorter queue, relative to the other candidates, scores higher.

Reads each server's ``num_waiting``. Score = (longest - own) / (longest - shortest); when all queues
are equal every candidate scores 1. Part of the composite heuristic profile.

Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from router.params import build_params
from router.roles import Candidate, Request

TYPE = "queue-scorer"


@dataclass(frozen=True)
class Params:
    pass


@dataclass(frozen=True)
class QueueScorer:
    name: str
    params: Params = Params()

    def score(self, request: Request, candidates: Sequence[Candidate]) -> tuple[float, ...]:
        queues = [c.server.num_waiting for c in candidates]
        if not queues:
            return ()
        low, high = min(queues), max(queues)
        if high == low:
            return tuple(1.0 for _ in queues)
        return tuple((high - q) / (high - low) for q in queues)


def build(name: str, raw: Mapping[str, Any] | None = None) -> QueueScorer:
    return QueueScorer(name, build_params(Params, raw, name))
