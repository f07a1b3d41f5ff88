"""tpot-protection-filter: keeps the servers where the fewest running streams are at risk of missing their TPOT SLO.

Reads each candidate's ``tpot_at_risk``: the streams the router has running there that are behind the TPOT
SLO they are held to by at most one SLO interval (:func:`contract.slo.tpot_at_risk`, from the tokens the
router relays), each counted as the chance that it ends within a few tokens (from the lengths recent streams
completed with). Such a stream needs a decode step or two without a prefill beside them before it ends; a new
request's prefill on that server takes those steps away and turns it into a miss: ``tpot_at_risk`` is the
expected number of misses it would cause there. Of the candidates it may choose, it
keeps those where it would cause at most ``tolerance`` more expected misses than the fewest; when that would
drop none of them
(equally many everywhere: none, typically, at low load), it keeps everyone. Put after the SLO tier filter, it
sends a request within its own SLO to a server whose running streams it does not hurt, and a burst that
fills every server goes where it hurts least.

Which candidates it may choose, when the request has a TTFT SLO and predictions: those predicted to leave it
``ttftMargin`` of its TTFT SLO, when the fastest does; otherwise (the request is late anyway) those at most
``ttftPenalty`` × its TTFT SLO slower than the fastest. Without a TTFT SLO or predictions, any candidate.

Parameters:
    tolerance (0): expected misses a candidate may cause beyond the fewest and still be kept: 0 keeps only the
        servers where it causes the fewest. Chosen by the worst case over the Azure, Mooncake and bursty code
        loads at every load (docs/benchmarks.md, "Attainment-aware scheduling"): 0 against 0.25 and 1.
    ttftMargin (0): the share of the request's TTFT SLO a server chosen to spare streams must leave it (0: it
        must be predicted within the SLO). 0 against 0.2 and 0.4, by the same worst case: 0.2 keeps 1–2 more
        points at Azure 4× and Mooncake 1×, 0 up to 1 point more on the bursty code loads, where the worst case is.
    ttftPenalty (1.0): for a request no server can serve with that margin, how much slower than the fastest
        (a share of its TTFT SLO) a server may be and still be chosen to spare the others' streams.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from headroom.router.framework.candidate_set import CandidateSet
from headroom.router.framework.params import build_params, check_range
from headroom.router.framework.roles import Candidate, Context, Request

TYPE = "tpot-protection-filter"


@dataclass(frozen=True)
class Params:
    tolerance: float = 0.0
    ttft_margin: float = 0.0
    ttft_penalty: float = 1.0

    def __post_init__(self) -> None:
        check_range("tolerance", self.tolerance, 0.0, 1_000_000.0)
        check_range("ttft_margin", self.ttft_margin, 0.0, 1.0)
        check_range("ttft_penalty", self.ttft_penalty, 0.0, math.inf)


@dataclass(frozen=True)
class TpotProtectionFilter:
    name: str
    params: Params = Params()

    def filter(self, request: Request, candidates: Sequence[Candidate], context: Context) -> Sequence[Candidate]:
        everyone = CandidateSet.of(candidates)
        at_risk = everyone.tpot_at_risk
        if not len(at_risk) or at_risk.max() <= at_risk.min() + self.params.tolerance:
            return everyone
        allowed = self._allowed(request, everyone.column(everyone.ttft_ms))
        keep = allowed & (at_risk <= at_risk[allowed].min() + self.params.tolerance)
        return everyone if (keep == allowed).all() else everyone.take(np.flatnonzero(keep))

    def _allowed(self, request: Request, ttft: np.ndarray) -> np.ndarray:
        """The candidates it may choose (see the module docstring); unpredicted ones always."""
        slo = request.slo_ttft_ms
        if slo is None or np.isnan(ttft).all():
            return np.ones(len(ttft), dtype=bool)
        fastest = np.nanmin(ttft)
        limit = (1.0 - self.params.ttft_margin) * slo
        if fastest > limit:
            limit = fastest + self.params.ttft_penalty * slo
        return ~(ttft > limit)


def build(name: str, raw: Mapping[str, Any] | None = None) -> TpotProtectionFilter:
    return TpotProtectionFilter(name, build_params(Params, raw, name))
