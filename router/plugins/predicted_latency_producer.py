"""predicted-latency-producer: predicts TTFT and TPOT for every candidate and computes SLO headroom.

Reads each candidate's server snapshot and the request, builds one feature matrix per pool with
:func:`contract.features.feature_matrix`, and asks ``context.predictor`` once per pool. Headroom is
``SLO - prediction``: TTFT against the request's TTFT SLO (for a non-streaming request, whose first
token arrives with its last, the predicted E2E when the predictor gives one); TPOT only for streaming requests, against the
tightest of the request's TPOT SLO and those already running on that server, times ``sloBufferFactor``.

Edges, per candidate (never all-or-nothing): no predictor or the predictor raising for a pool leaves
that pool's candidates unpredicted with the predictor's reason (``predictor-unavailable``, ``no-model``,
...); a row the predictor marks not ok or that is not finite gets ``prediction-failed``; a server whose
metrics are older than ``maxMetricsAgeMs`` gets ``stale-metrics``. Unpredicted candidates keep
``fallback_reason`` and are scored by the heuristic profile.

Parameters:
    sloBufferFactor (1.0): multiplies the effective TPOT SLO (below 1 leaves a safety margin).
    maxMetricsAgeMs (5000): metrics older than this make a candidate's prediction stale; 0 disables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from contract.features import feature_matrix
from router.errors import PredictionUnavailable
from router.params import build_params, check_range
from router.roles import Candidate, Context, Prediction, Request

TYPE = "predicted-latency-producer"


@dataclass(frozen=True)
class Params:
    slo_buffer_factor: float = 1.0
    max_metrics_age_ms: float = 5000.0

    def __post_init__(self) -> None:
        check_range("slo_buffer_factor", self.slo_buffer_factor, 0.01, 10.0)
        check_range("max_metrics_age_ms", self.max_metrics_age_ms, 0.0, 3.6e6)


@dataclass(frozen=True)
class PredictedLatencyProducer:
    name: str
    params: Params = Params()

    def produce(self, request: Request, candidates: Sequence[Candidate], context: Context) -> tuple[Candidate, ...]:
        out: list[Candidate | None] = [None] * len(candidates)
        pending: dict[str, list[int]] = {}
        max_age_s = self.params.max_metrics_age_ms / 1000.0 if self.params.max_metrics_age_ms else float("inf")
        for i, cand in enumerate(candidates):
            server = cand.server
            if server.metrics_age_s > max_age_s:
                out[i] = cand.with_prediction(None, fallback_reason="stale-metrics")
            elif context.predictor is None:
                out[i] = cand.with_prediction(None, fallback_reason="predictor-unavailable")
            elif server.pool_key in pending:
                pending[server.pool_key].append(i)
            else:
                pending[server.pool_key] = [i]
        for pool_key, rows in pending.items():
            group = [candidates[i] for i in rows]
            try:
                batch = context.predictor.predict(pool_key, candidate_features(request, group))  # type: ignore[union-attr]
            except PredictionUnavailable as err:
                for i in rows:
                    out[i] = candidates[i].with_prediction(None, fallback_reason=err.reason)
                continue
            predictions = _predictions(batch, len(rows))
            if request.has_slo:
                for i, prediction in zip(rows, predictions):
                    out[i] = self._with_headroom(request, candidates[i], prediction)
            else:
                for i, prediction in zip(rows, predictions):
                    out[i] = Candidate(candidates[i].server, prediction, None, None,
                                       None if prediction is not None else "prediction-failed")
        return tuple(c for c in out if c is not None)

    def _with_headroom(self, request: Request, cand: Candidate, prediction: Prediction | None) -> Candidate:
        if prediction is None:
            return cand.with_prediction(None, fallback_reason="prediction-failed")
        if not request.has_slo:
            return cand.with_prediction(prediction)
        first_ms = prediction.response_ms(request.stream)
        ttft_headroom = None if request.slo_ttft_ms is None else request.slo_ttft_ms - first_ms
        tpot_headroom = None
        if request.stream:
            slos = [s for s in (request.slo_tpot_ms, cand.server.tightest_running_tpot_slo_ms) if s is not None]
            if slos and request.has_slo:
                tpot_headroom = min(slos) * self.params.slo_buffer_factor - prediction.tpot_ms
        return cand.with_prediction(prediction, ttft_headroom_ms=ttft_headroom, tpot_headroom_ms=tpot_headroom,
                                    fallback_reason=None)


def candidate_features(request: Request, group: Sequence[Candidate]) -> np.ndarray:
    """The feature matrix of ``request`` on each candidate's server, one row per candidate."""
    state = np.array([(c.server.kv_cache_usage, c.server.num_waiting, c.server.num_running, c.server.prefix_match,
                       c.server.inflight_requests, c.server.inflight_prompt_tokens) for c in group],
                     dtype=np.float32).reshape(len(group), 6)
    n = len(group)
    return feature_matrix({
        "kv_cache_usage": state[:, 0], "num_waiting": state[:, 1], "num_running": state[:, 2],
        "prompt_tokens": np.full(n, request.prompt_tokens, dtype=np.float32), "prefix_match": state[:, 3],
        "inflight_requests": state[:, 4], "inflight_prompt_tokens": state[:, 5],
        "max_tokens": np.full(n, request.max_tokens, dtype=np.float32),
    })


def _predictions(batch: Any, n: int) -> list[Prediction | None]:
    """One prediction per row, None where the predictor said not ok or a value is not a finite latency."""
    values: Mapping[str, Any] = batch.values
    if "ttft" not in values or "tpot" not in values:
        return [None] * n
    columns = [np.asarray(values[t], dtype=np.float64) for t in ("ttft", "tpot", "e2e") if t in values]
    usable = np.asarray(batch.ok, dtype=bool).copy()
    for column in columns:
        usable &= np.isfinite(column) & (column >= 0)
    ttft, tpot = columns[0].tolist(), columns[1].tolist()
    e2e = columns[2].tolist() if len(columns) > 2 else [None] * n
    versions = dict(batch.versions)
    return [Prediction(ttft[j], tpot[j], e2e[j], versions) if ok else None
            for j, ok in enumerate(usable.tolist())]


def build(name: str, raw: Mapping[str, Any] | None = None) -> PredictedLatencyProducer:
    return PredictedLatencyProducer(name, build_params(Params, raw, name))
