"""kv-cache-free-scorer: a heuristic scorer; more free KV cache scores higher.

Reads each server's ``kv_cache_usage``; score = 1 - usage. Part of the composite heuristic profile.

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

TYPE = "kv-cache-free-scorer"


@dataclass(frozen=True)
class Params:
    pass


@dataclass(frozen=True)
class KvCacheFreeScorer:
    name: str
    params: Params = Params()

    def score(self, request: Request, candidates: Sequence[Candidate]) -> np.ndarray:
        return 1.0 - CandidateSet.of(candidates).server_column("kv_cache_usage")


def build(name: str, raw: Mapping[str, Any] | None = None) -> KvCacheFreeScorer:
    return KvCacheFreeScorer(name, build_params(Params, raw, name))
