"""late-concentration-filter: sends a request that will miss its SLO everywhere to where the most late work is.

When a burst exceeds what the pool can serve within SLO, spreading the excess puts a little of it in every
server's queue, and every server's next requests start just past their SLO. This filter decides instead who
misses: a request predicted to miss its SLO on every candidate (even the fastest is predicted past
``(1 + lateMargin)`` × its TTFT SLO, or past its TPOT SLO) while every candidate has prefill queued ahead
goes only to the candidates with the most (``inflight_prefill_tokens``: the router's own, fresh count), the
servers already furthest behind. Queued there behind work that is late anyway, it delays nobody who could
still make their SLO, and the other servers keep their capacity for the requests that can. With ``holdCap``, a
front that can wait (the proxy) holds such a request at the router first (:mod:`router.control.held`), so the
burst's late requests wait in one queue the whole pool drains rather than behind the servers furthest behind.

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
    holdCap (5): a multiple of the request's TTFT SLO: a request that would be concentrated, and is not sheddable,
        is held at the router instead (:meth:`LateConcentrationFilter.hold`) until some server is idle (nothing
        running, waiting or in flight there), or until it has waited ``holdCap`` × its TTFT SLO; then it is
        scheduled as any request (concentrated, if it is still late everywhere in a burst). So the late requests
        of a burst wait in one queue that the whole pool drains, oldest first, with capacity no request in time
        could use, rather than behind one server or among streams still in time. 5 raised attainment at every
        load point where any request is held, and was the least cap at or above every baseline's on Mooncake
        past capacity; its cost is the tail of the held requests at capacity on bursty loads (up to the cap:
        docs/benchmarks.md, "Holding the late requests at the router"). 0: never held.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from headroom.router.framework.candidate_set import CandidateSet
from headroom.router.framework.params import build_params, check_range
from headroom.router.framework.roles import Candidate, Context, Held, Request

TYPE = "late-concentration-filter"


@dataclass(frozen=True)
class Params:
    late_margin: float = 0.0
    include_tpot: bool = True
    only_in_a_burst: bool = True
    late_cap: float = 5.0
    late_slack: float = math.inf
    hold_cap: float = 5.0

    def __post_init__(self) -> None:
        check_range("late_margin", self.late_margin, -1.0, math.inf)
        check_range("late_slack", self.late_slack, 0.0, math.inf)
        check_range("hold_cap", self.hold_cap, 0.0, math.inf)
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
        late = self._late_in_a_burst(request, everyone)
        if late is None:
            return everyone
        ttft, backlog, slo = late
        capped = ttft <= min(self.params.late_cap * slo, ttft.min() + self.params.late_slack * slo)
        if capped.any():
            keep = capped & (backlog == backlog[capped].max())
        else:  # late past the cap everywhere: where it will be least late, so the backlog grows evenly
            keep = ttft == ttft.min()
        return everyone if keep.all() else everyone.take(np.flatnonzero(keep))

    def hold(self, request: Request, candidates: Sequence[Candidate]) -> Held | None:
        """Why the router should hold ``request`` for now rather than concentrate it (None: send it now)."""
        slo = request.slo_ttft_ms
        if not request.holdable or request.sheddable or slo is None or request.waited_ms >= self.params.hold_cap * slo:
            return None
        everyone, left_ms = CandidateSet.of(candidates), self.params.hold_cap * slo - request.waited_ms
        if request.waited_ms > 0:  # held already: until a server is idle
            if everyone.column(everyone.servers.is_idle).any():
                return None
            return Held(f"none of {len(candidates)} servers is idle yet", left_ms)
        if self._late_in_a_burst(request, everyone) is None:
            return None
        return Held(f"predicted to miss its SLO on every one of {len(candidates)} servers, all with prefill queued",
                    left_ms)

    def _late_in_a_burst(self, request: Request, everyone: CandidateSet) -> tuple[np.ndarray, np.ndarray, float] | None:
        """The candidates' TTFTs and prefill backlogs and the request's TTFT SLO if it is predicted to miss its SLO
        everywhere in a burst (None: it keeps every candidate)."""
        slo = request.slo_ttft_ms
        ttft = everyone.column(everyone.ttft_ms)
        if slo is None or len(ttft) < 2 or np.isnan(ttft).any():
            return None
        in_time = ttft <= (1.0 + self.params.late_margin) * slo
        if self.params.include_tpot:
            in_time &= ~(everyone.tpot_headroom_ms < 0)
        if in_time.any():
            return None
        backlog = everyone.server_column("inflight_prefill_tokens")
        if self.params.only_in_a_burst and backlog.min() == 0:
            return None
        return ttft, backlog, slo


def build(name: str, raw: Mapping[str, Any] | None = None) -> LateConcentrationFilter:
    return LateConcentrationFilter(name, build_params(Params, raw, name))
