"""latency-slo-admitter: sheds a sheddable request that no server can serve within its SLO without harm.

Reads the request's priority and SLOs and every candidate after prediction (before filtering). Only a
request with SLO headers (or the pool's default SLO) that is sheddable (priority < 0) can be rejected, and
only when every candidate has a prediction. It is rejected when no candidate is predicted to meet its SLO
and none is idle or cold (KV-cache usage below 2%) — it would miss anyway and take capacity from others —
or, with ``protectRunning``, when every candidate predicted to meet it has streams running over their
TPOT SLO (``tpot_at_risk``): serving it there would spread those misses, so in a burst the sheddable
requests yield to the others. It fails open: a candidate without a prediction might meet the SLO.

Parameters:
    protectRunning (true): also shed a request whose only servers within its SLO have streams over theirs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from headroom.router.framework.candidate_set import CandidateSet
from headroom.router.framework.params import build_params
from headroom.router.framework.roles import Candidate, Request

TYPE = "latency-slo-admitter"


@dataclass(frozen=True)
class Params:
    protect_running: bool = True


@dataclass(frozen=True)
class LatencySloAdmitter:
    name: str
    params: Params = Params()

    def admit(self, request: Request, candidates: Sequence[Candidate]) -> str | None:
        if not request.has_slo or not request.sheddable or not len(candidates):
            return None
        cands = CandidateSet.of(candidates)
        known, meets = cands.slo_verdicts()
        if not known.all():
            return None
        servers = cands.servers
        safe = meets & (cands.tpot_at_risk == 0) if self.params.protect_running else meets
        if (safe | cands.column(servers.is_idle) | cands.column(servers.is_cold)).any():
            return None
        return rejection(request, len(candidates), bool(meets.any()))


def rejection(request: Request, servers: int, some_meet: bool) -> str:
    """Why ``request`` is shed among ``servers``: ``some_meet`` when servers meet its SLO but have streams at risk."""
    if some_meet:
        return (f"sheddable request (priority {request.priority}) rejected: every server predicted to meet its "
                f"SLO has streams at risk of missing their TPOT SLO")
    return (f"sheddable request (priority {request.priority}) rejected: none of {servers} servers is predicted to "
            f"meet its SLO")


def build(name: str, raw: Mapping[str, Any] | None = None) -> LatencySloAdmitter:
    return LatencySloAdmitter(name, build_params(Params, raw, name))
