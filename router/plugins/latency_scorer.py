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

from router.params import build_params, check_range
from router.roles import Candidate, Request

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

    def score(self, request: Request, candidates: Sequence[Candidate]) -> tuple[float, ...]:
        verdicts = [c.meets_slo for c in candidates]
        if any(v is not None for v in verdicts):
            if any(v is True for v in verdicts):
                return self._by_headroom(candidates)
            return self._by_deficit(candidates)
        return self._by_latency(request, candidates)

    def _by_latency(self, request: Request, candidates: Sequence[Candidate]) -> tuple[float, ...]:
        rows = [i for i, c in enumerate(candidates) if c.prediction is not None]
        if request.stream:
            parts = [([candidates[i].prediction.ttft_ms for i in rows], self.params.ttft_weight),  # type: ignore[union-attr]
                     ([candidates[i].prediction.tpot_ms for i in rows], self.params.tpot_weight)]  # type: ignore[union-attr]
        else:
            parts = [([candidates[i].prediction.response_ms(False) for i in rows], 1.0)]  # type: ignore[union-attr]
        badness = _combine(parts)
        scores = [0.0] * len(candidates)
        for i, bad in zip(rows, badness):
            scores[i] = 1.0 - bad
        return tuple(scores)

    def _by_headroom(self, candidates: Sequence[Candidate]) -> tuple[float, ...]:
        rows = [i for i, c in enumerate(candidates) if c.meets_slo is True]
        parts = [([candidates[i].ttft_headroom_ms for i in rows], self.params.ttft_weight),
                 ([candidates[i].tpot_headroom_ms for i in rows], self.params.tpot_weight)]
        spread = _combine(parts)
        scores = [0.0] * len(candidates)
        for i, s in zip(rows, spread):
            x = s if self.params.headroom_selection_strategy == "most" else 1.0 - s
            scores[i] = POSITIVE_FLOOR + (1.0 - POSITIVE_FLOOR) * x
        return tuple(scores)

    def _by_deficit(self, candidates: Sequence[Candidate]) -> tuple[float, ...]:
        idle = [c.server.is_idle for c in candidates]
        if any(idle):
            return tuple(1.0 if i else 0.0 for i in idle)
        rows = [i for i, c in enumerate(candidates) if c.meets_slo is False]
        parts = [([_deficit(candidates[i].ttft_headroom_ms) for i in rows], self.params.ttft_weight),
                 ([_deficit(candidates[i].tpot_headroom_ms) for i in rows], self.params.tpot_weight)]
        deficit = _combine(parts)
        scores = [0.0] * len(candidates)
        for i, d in zip(rows, deficit):
            scores[i] = 1.0 - d
        return tuple(scores)


def _deficit(headroom: float | None) -> float | None:
    return None if headroom is None else max(0.0, -headroom)


def _combine(parts: list[tuple[list[Any], float]]) -> list[float]:
    """Weighted mean of per-part min-max normalised values (0 = smallest); parts that are missing or equal
    for every candidate drop out."""
    n = len(parts[0][0])
    total = [0.0] * n
    weight_sum = 0.0
    for values, weight in parts:
        if weight <= 0 or any(v is None for v in values):
            continue
        low, high = min(values, default=0.0), max(values, default=0.0)
        if high <= low:
            continue  # a part on which all candidates agree does not separate them
        for i, v in enumerate(values):
            total[i] += weight * (v - low) / (high - low)
        weight_sum += weight
    return [t / weight_sum for t in total] if weight_sum > 0 else total


def build(name: str, raw: Mapping[str, Any] | None = None) -> LatencyScorer:
    return LatencyScorer(name, build_params(Params, raw, name))
