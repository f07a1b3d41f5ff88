"""tpot-protection-filter: keeps the servers where the fewest running streams are missing their TPOT SLO.

Reads each candidate's ``tpot_at_risk``: how many of the streams the router has running there are over the
TPOT SLO they are held to (:func:`contract.slo.tpot_over_slo`, from the tokens the router relays). A
stream over its SLO needs decode steps without a prefill beside them before it ends; a new request's
prefill on that server takes those steps away and spreads the miss. Among the candidates whose predicted
TTFT is within ``ttftPenalty`` × the request's TTFT SLO of the best (all of them when the request has no
TTFT SLO or there are no predictions), it keeps those
with at most ``tolerance`` more such streams than the fewest; when that would drop none of them (equally
many everywhere: none, typically, at low load), it keeps everyone. Put after the SLO tier filter, it sends a request within its own
SLO to a server whose running streams it does not hurt, and a burst that fills every server goes where it
hurts least.

Parameters:
    tolerance (0): streams over their SLO a candidate may have beyond the fewest and still be kept.
    ttftPenalty (1.0): how much slower (predicted TTFT) than the fastest a server may be, as a share of the
        request's TTFT SLO, and still be chosen to spare the others' streams. 1 leaves the choice to the SLO
        tier filter before it; lower values keep requests nearer the fastest server, which costs the bursty
        short-output loads much of their gain (0.25: up to 13 points of attainment under the best baseline at
        twice capacity) and spares long-output loads a few TTFT misses at their highest loads (Azure, 7×
        capacity: 3 points) — docs/benchmarks.md, "Attainment-aware scheduling".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from headroom.router.candidate_set import CandidateSet
from headroom.router.params import build_params, check_range
from headroom.router.roles import Candidate, Context, Request

TYPE = "tpot-protection-filter"


@dataclass(frozen=True)
class Params:
    tolerance: int = 0
    ttft_penalty: float = 1.0

    def __post_init__(self) -> None:
        check_range("tolerance", self.tolerance, 0, 1_000_000)
        check_range("ttft_penalty", self.ttft_penalty, 0.0, math.inf)


@dataclass(frozen=True)
class TpotProtectionFilter:
    name: str
    params: Params = Params()

    def filter(self, request: Request, candidates: Sequence[Candidate], context: Context) -> Sequence[Candidate]:
        everyone = CandidateSet.of(candidates)
        at_risk = everyone.server_column("tpot_at_risk")
        if not len(at_risk) or at_risk.max() <= at_risk.min() + self.params.tolerance:
            return everyone
        near = np.ones(len(at_risk), dtype=bool)
        ttft = everyone.column(everyone.ttft_ms)
        if request.slo_ttft_ms is not None and not np.isnan(ttft).all():
            penalty = self.params.ttft_penalty * request.slo_ttft_ms
            near = ~(ttft > np.nanmin(ttft) + penalty)  # unpredicted ones stay near
        keep = near & (at_risk <= at_risk[near].min() + self.params.tolerance)
        return everyone if (keep == near).all() else everyone.take(np.flatnonzero(keep))


def build(name: str, raw: Mapping[str, Any] | None = None) -> TpotProtectionFilter:
    return TpotProtectionFilter(name, build_params(Params, raw, name))
