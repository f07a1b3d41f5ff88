"""late-concentration-filter: sends a request that will miss its SLO everywhere to where the most late work is.

When a burst exceeds what the pool can serve within SLO, spreading the excess puts a little of it in every
server's queue, and every server's next requests start just past their SLO. This filter decides instead who
misses: a request predicted to miss its SLO on every candidate (even the fastest is predicted past
``(1 + lateMargin)`` × its TTFT SLO, or past its TPOT SLO) while every candidate has prefill queued ahead
goes only to the candidates with the most (``inflight_prefill_tokens``: the router's own, fresh count), the
servers already furthest behind. Queued there behind work that is late anyway, it delays nobody who could
still make their SLO, and the other servers keep their capacity for the requests that can.

A request that some candidate is predicted to serve within its SLO, or one without a TTFT SLO or without
predictions everywhere, keeps every candidate. Put after the SLO tier filter (which then keeps everyone: no
server is in the positive tier). Chosen by the worst case over the Azure, Mooncake and bursty code loads
(docs/benchmarks.md, "Attainment-aware scheduling").

Parameters:
    lateMargin (0): how far past its TTFT SLO (a share of it, -1 to any) even the fastest candidate must be
        predicted before the request is concentrated: above 0 a request predicted just late still goes where
        a prediction error could let it make it; below 0 one predicted just in time is given up too.
    includeTPOT (true): a candidate predicted to miss the request's TPOT SLO counts as late too.
    onlyInABurst (true): concentrate only when every candidate has prefill queued ahead; a request late even
        where none is queued is late by its own size (a long prompt), not by a burst, and keeps everyone.
    lateCap (5): a multiple of the request's TTFT SLO, above ``1 + lateMargin``: the request is concentrated
        only onto the most queued of the servers predicted to start it within ``lateCap`` × its TTFT SLO; when
        none is, it goes where it is predicted least late, so a burst past the cap everywhere is spread evenly.
        The cap bounds the p99 TTFT past capacity (≈ cap × TTFT SLO) at a cost in attainment; 5 is the least
        that kept attainment at or above every baseline's at every load measured (``.inf``: no bound;
        docs/benchmarks.md, "Bounded sacrifice").
    lateSlack (.inf): a multiple of the request's TTFT SLO, at least 0: the servers it may be concentrated onto
        must also be predicted to start it within ``lateSlack`` × its TTFT SLO of the fastest candidate, so
        the delay a late request is given is bounded by how late it is anyway, not only by the cap. Off by
        default: 1 meets the p99 TTFT goal at capacity on the code loads but spreads the late requests past
        capacity and falls behind least-KV there (docs/benchmarks.md, "Bounding a late request by the fastest
        server instead").
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

TYPE = "late-concentration-filter"


@dataclass(frozen=True)
class Params:
    late_margin: float = 0.0
    include_tpot: bool = True
    only_in_a_burst: bool = True
    late_cap: float = 5.0
    late_slack: float = math.inf

    def __post_init__(self) -> None:
        check_range("late_margin", self.late_margin, -1.0, math.inf)
        check_range("late_slack", self.late_slack, 0.0, math.inf)
        if not self.late_cap > 1.0 + self.late_margin:
            raise ValueError(
                f"parameter 'lateCap' ({self.late_cap}) must exceed 1 + 'lateMargin' ({self.late_margin}): "
                "no server predicted late beyond the margin could be within the cap"
            )


@dataclass(frozen=True)
class LateConcentrationFilter:
    name: str
    params: Params = Params()

    def filter(self, request: Request, candidates: Sequence[Candidate], context: Context) -> Sequence[Candidate]:
        everyone = CandidateSet.of(candidates)
        slo = request.slo_ttft_ms
        ttft = everyone.column(everyone.ttft_ms)
        if slo is None or len(ttft) < 2 or np.isnan(ttft).any():
            return everyone
        in_time = ttft <= (1.0 + self.params.late_margin) * slo
        if self.params.include_tpot:
            in_time &= ~(everyone.tpot_headroom_ms < 0)
        if in_time.any():
            return everyone
        backlog = everyone.server_column("inflight_prefill_tokens")
        if self.params.only_in_a_burst and backlog.min() == 0:
            return everyone
        capped = ttft <= min(self.params.late_cap * slo, ttft.min() + self.params.late_slack * slo)
        if capped.any():
            keep = capped & (backlog == backlog[capped].max())
        else:  # late past the cap everywhere: where it will be least late, so the backlog grows evenly
            keep = ttft == ttft.min()
        return everyone if keep.all() else everyone.take(np.flatnonzero(keep))


def build(name: str, raw: Mapping[str, Any] | None = None) -> LateConcentrationFilter:
    return LateConcentrationFilter(name, build_params(Params, raw, name))
