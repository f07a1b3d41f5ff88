"""kv-cache-free-scorer: a heuristic scorer; more free KV cache scores higher.

Reads each server's ``kv_cache_usage``; score = 1 - usage. Part of the composite heuristic profile.

Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from router.params import build_params
from router.roles import Candidate, Request

TYPE = "kv-cache-free-scorer"


@dataclass(frozen=True)
class Params:
    pass


@dataclass(frozen=True)
class KvCacheFreeScorer:
    name: str
    params: Params = Params()

    def score(self, request: Request, candidates: Sequence[Candidate]) -> tuple[float, ...]:
        return tuple(1.0 - c.server.kv_cache_usage for c in candidates)


def build(name: str, raw: Mapping[str, Any] | None = None) -> KvCacheFreeScorer:
    return KvCacheFreeScorer(name, build_params(Params, raw, name))
