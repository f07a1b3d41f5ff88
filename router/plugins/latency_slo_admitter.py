"""latency-slo-admitter: sheds a sheddable request that no server is predicted to serve within its SLO.

Reads the request's priority and SLOs and every candidate after prediction (before filtering). Rejects
only when the request has SLO headers, is sheddable (priority < 0), every candidate has a prediction
and none is predicted to meet the SLO, and no candidate is idle or cold (KV-cache usage below 2%).
It fails open: a candidate without a prediction might meet the SLO, so it admits.

Parameters: none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from headroom.router.candidate_set import CandidateSet
from headroom.router.params import build_params
from headroom.router.roles import Candidate, Request

TYPE = "latency-slo-admitter"


@dataclass(frozen=True)
class Params:
    pass


@dataclass(frozen=True)
class LatencySloAdmitter:
    name: str
    params: Params = Params()

    def admit(self, request: Request, candidates: Sequence[Candidate]) -> str | None:
        if not request.has_slo or not request.sheddable or not len(candidates):
            return None
        cands = CandidateSet.of(candidates)
        known, meets = cands.slo_verdicts()
        hopeless = known & ~meets & ~cands.column(cands.servers.is_idle) & ~cands.column(cands.servers.is_cold)
        if not hopeless.all():
            return None
        return (f"sheddable request (priority {request.priority}) rejected: none of {len(candidates)} "
                f"servers is predicted to meet its SLO")


def build(name: str, raw: Mapping[str, Any] | None = None) -> LatencySloAdmitter:
    return LatencySloAdmitter(name, build_params(Params, raw, name))
