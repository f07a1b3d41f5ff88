"""latency-scorer: scores predicted candidates by latency, or by SLO headroom when the request has SLOs.

Reads each candidate's prediction and headroom (from the producer). Without an applicable SLO, lower
predicted latency scores higher: for streaming requests TTFT and TPOT are min-max normalised across the
candidates and combined with ``ttftWeight`` / ``tpotWeight``; for non-streaming requests the predicted
response time (E2E) alone counts. With SLOs, candidates predicted to meet them score by headroom with
``headroomSelectionStrategy``: ``least`` packs (smallest positive headroom scores highest), ``most``
spreads (largest headroom scores highest); every positive candidate keeps at least a small score, and
candidates that would miss score 0. When no candidate is predicted to meet the SLO, idle servers score
1 and the rest 0; without idle servers, the smallest weighted deficit scores highest. Unpredicted
candidates score 0 (the engine scores those with the heuristic profile).

Parameters:
    headroomSelectionStrategy ("most"): ``most`` (spreading) or ``least`` (bin-packing, the reference's
        default). ``most`` is the default because it measured far better SLO attainment and goodput on the
        simulated pool (docs/benchmarks.md, "Router"): packing sends each request where its predicted
        latency is just under the SLO, so any underestimate becomes a miss.
    ttftWeight (0.8): weight of TTFT in combined latency, headroom and deficit.
    tpotWeight (0.2): weight of TPOT.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from headroom.router.framework.candidate_set import CandidateSet
from headroom.router.framework.params import build_params, check_range
from headroom.router.framework.roles import Candidate, Request

TYPE = "latency-scorer"
POSITIVE_FLOOR = 0.01  # least score of a candidate predicted to meet its SLO


@dataclass(frozen=True)
class Params:
    headroom_selection_strategy: Literal["least", "most"] = "most"
    ttft_weight: float = 0.8
    tpot_weight: float = 0.2

    def __post_init__(self) -> None:
        check_range("ttft_weight", self.ttft_weight, 0.0, 1.0)
        check_range("tpot_weight", self.tpot_weight, 0.0, 1.0)
        if self.ttft_weight + self.tpot_weight <= 0:
            raise ValueError("parameters 'ttftWeight' and 'tpotWeight' must not both be 0")


@dataclass(frozen=True)
class LatencyScorer:
    name: str
    params: Params = Params()

    def score(self, request: Request, candidates: Sequence[Candidate]) -> np.ndarray:
        cands = CandidateSet.of(candidates)
        known, meets = cands.slo_verdicts()
        if known.any():
            positive = known & meets
            if positive.any():
                return self._by_headroom(cands, positive)
            return self._by_deficit(cands, known)
        return self._by_latency(request, cands)

    def _by_latency(self, request: Request, cands: CandidateSet) -> np.ndarray:
        rows = cands.is_predicted
        if request.stream:
            parts = [(cands.column(cands.ttft_ms)[rows], self.params.ttft_weight),
                     (cands.column(cands.tpot_ms)[rows], self.params.tpot_weight)]
        else:
            parts = [(cands.response_ms(False)[rows], 1.0)]
        scores = np.zeros(len(cands))
        scores[rows] = 1.0 - _combine(parts)
        return scores

    def _by_headroom(self, cands: CandidateSet, rows: np.ndarray) -> np.ndarray:
        parts = [(cands.ttft_headroom_ms[rows], self.params.ttft_weight),
                 (cands.tpot_headroom_ms[rows], self.params.tpot_weight)]
        spread = _combine(parts)
        x = spread if self.params.headroom_selection_strategy == "most" else 1.0 - spread
        scores = np.zeros(len(cands))
        scores[rows] = POSITIVE_FLOOR + (1.0 - POSITIVE_FLOOR) * x
        return scores

    def _by_deficit(self, cands: CandidateSet, rows: np.ndarray) -> np.ndarray:
        idle = cands.column(cands.servers.is_idle)
        if idle.any():
            return idle.astype(np.float64)
        parts = [(np.maximum(0.0, -cands.ttft_headroom_ms[rows]), self.params.ttft_weight),
                 (np.maximum(0.0, -cands.tpot_headroom_ms[rows]), self.params.tpot_weight)]
        scores = np.zeros(len(cands))
        scores[rows] = 1.0 - _combine(parts)
        return scores


def _combine(parts: list[tuple[np.ndarray, float]]) -> np.ndarray:
    """Weighted mean of per-part min-max normalised values (0 = smallest); parts that are missing (NaN) or
    equal for every candidate drop out."""
    total = np.zeros(len(parts[0][0]))
    weight_sum = 0.0
    for values, weight in parts:
        if weight <= 0 or not len(values) or np.isnan(values).any():
            continue
        low, high = values.min(), values.max()
        if high <= low:
            continue  # a part on which all candidates agree does not separate them
        total += weight * (values - low) / (high - low)
        weight_sum += weight
    return total / weight_sum if weight_sum > 0 else total


def build(name: str, raw: Mapping[str, Any] | None = None) -> LatencyScorer:
    return LatencyScorer(name, build_params(Params, raw, name))
