"""predicted-latency-producer: predicts TTFT and TPOT for every candidate and computes SLO headroom.

Reads each candidate's server snapshot and the request, builds one feature matrix per pool with
:func:`router.framework.candidate_features.table_features`, and asks ``context.predictor`` once per pool. Headroom is
``SLO - prediction``: TTFT against the request's TTFT SLO (for a non-streaming request, whose first
token arrives with its last, the predicted E2E when the predictor gives one for every server compared:
:func:`contract.targets.response_ms`); TPOT only for streaming requests, against the
tightest of the request's TPOT SLO and those already running on that server, times ``sloBufferFactor``.

The TPOT models predict a mean; where streams' TPOT scatters widely around it (short outputs in a burst: a clean
decode or a prefill beside every step) a mean below the SLO hides that most streams miss it. With
``tpotQuantile`` set, the effective TPOT SLO is divided by that quantile of the pool's recent ratios of the TPOT
streams got to their prediction (``context.tpot_ratios``, the router's record of its completions), clamped to
``[tpotFactorFloor, tpotFactorCap]``: where the predictions hold, the verdict barely moves; where the mean hides a
miss, it tightens by what the router saw. The ratios come from every completion the router is told of, the Pick
API's reports included, as its telemetry does; ``tpotFactorCap`` bounds what any of them can do.

A model is retrained every so often; a server can change within seconds. With ``latencyCorrection`` (the
default), each candidate's predictions are multiplied by its ``latency_correction``: how far that server's latencies
have lately departed from the models' predictions, learned by the router from its own completions
(:mod:`feedback.latency_corrections`). A queue deeper than any the models were trained on is priced as the
deepest they saw, however slow it is to drain: with ``prefillFloor`` (the default), each candidate's TTFT (and E2E)
is at least its ``prefill_ms_per_token`` — the pace its streams lately went through prefill at, learned the same
way — times the prefill work ahead of this request there (the prompts queued ahead, ``inflight_prefill_tokens``,
and its own uncached part). Where that bound is above the prediction, it is the prediction, and the correction the
request's prediction records includes it.

Edges, per candidate (never all-or-nothing): no predictor or the predictor raising for a pool leaves
that pool's candidates unpredicted with the predictor's reason (``predictor-unavailable``, ``warm-up``,
``no-model-for-pool``, ...); a row the predictor marks not ok or that is not finite gets
``prediction-failed``; a server whose metrics are older than ``maxMetricsAgeMs`` gets ``stale-metrics``. Unpredicted candidates keep
``fallback_reason`` and are scored by the heuristic profile.

Parameters:
    sloBufferFactor (1.0): multiplies the effective TPOT SLO (below 1 leaves a safety margin).
    maxMetricsAgeMs (5000): metrics older than this make a candidate's prediction stale; 0 disables.
    tpotQuantile (0): the quantile of the got / predicted TPOT ratios the TPOT SLO is divided by; 0 disables.
    tpotWindow (500): how many of the pool's most recent ratios it is taken over (at most 10,000).
    tpotLeast (50): ratios needed before it applies.
    tpotFactorFloor (1.0), tpotFactorCap (2.0): the bounds of the factor.
    latencyCorrection (true): multiply each server's predictions by its latency correction.
    prefillFloor (true): bound each TTFT and E2E from below by the server's prefill pace times the work ahead.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from headroom.contract.targets import TARGETS, response_ms
from headroom.feedback.latency_corrections import prefill_work
from headroom.router.errors import PredictionUnavailable
from headroom.router.framework.candidate_features import table_features
from headroom.router.framework.candidate_set import NO_VERSIONS, CandidateSet
from headroom.router.framework.params import build_params, check_range
from headroom.router.framework.roles import Candidate, Context, Request
from headroom.router.framework.server_table import ServerTable
from headroom.tpot_ratios import MAX_RATIOS, TpotRatios

TYPE = "predicted-latency-producer"


@dataclass(frozen=True)
class Params:
    slo_buffer_factor: float = 1.0
    max_metrics_age_ms: float = 5000.0
    tpot_quantile: float = 0.0
    tpot_window: int = 500
    tpot_least: int = 50
    tpot_factor_floor: float = 1.0
    tpot_factor_cap: float = 2.0
    latency_correction: bool = True
    prefill_floor: bool = True

    def __post_init__(self) -> None:
        check_range("slo_buffer_factor", self.slo_buffer_factor, 0.01, 10.0)
        check_range("max_metrics_age_ms", self.max_metrics_age_ms, 0.0, 3.6e6)
        check_range("tpot_quantile", self.tpot_quantile, 0.0, 1.0)
        check_range("tpot_window", self.tpot_window, 1, MAX_RATIOS)
        check_range("tpot_least", self.tpot_least, 1, self.tpot_window)
        check_range("tpot_factor_floor", self.tpot_factor_floor, 0.1, 10.0)
        check_range("tpot_factor_cap", self.tpot_factor_cap, self.tpot_factor_floor, 10.0)

    def tpot_factor(self, ratios: TpotRatios | None, pool_key: str) -> float:
        """What the pool's TPOT SLO is divided by: 1 unless calibrating and enough ratios are known."""
        if not self.tpot_quantile or ratios is None:
            return 1.0
        q = ratios.quantile(pool_key, self.tpot_quantile, self.tpot_window, self.tpot_least)
        return 1.0 if q is None else min(max(q, self.tpot_factor_floor), self.tpot_factor_cap)


@dataclass(frozen=True)
class PredictedLatencyProducer:
    name: str
    params: Params = Params()

    def produce(self, request: Request, candidates: Sequence[Candidate], context: Context) -> CandidateSet:
        cands = CandidateSet.of(candidates)
        table = cands.servers
        n = len(table)
        predicted = np.zeros(n, dtype=bool)
        ttft, tpot, e2e = np.full(n, math.nan), np.full(n, math.nan), np.full(n, math.nan)
        calibrating = bool(self.params.tpot_quantile) and request.stream and request.has_slo  # a TPOT verdict
        tpot_factor = np.ones(n) if calibrating else None
        reasons: list[str | None] = list(cands.fallback_reason_by_row)
        versions: list[Mapping[str, int]] = [NO_VERSIONS] * n
        rows = cands.member_rows()
        every_row = cands.rows is None  # rows is every row of the table, in order
        max_age_s = self.params.max_metrics_age_ms / 1000.0 if self.params.max_metrics_age_ms else math.inf
        stale = table.metrics_age_s[rows] > max_age_s
        if stale.any():
            for i in rows[stale].tolist():
                reasons[i] = "stale-metrics"
            rows, every_row = rows[~stale], False
        if context.predictor is None:
            for i in rows.tolist():
                reasons[i] = "predictor-unavailable"
            rows = rows[:0]
        for pool_key, group in _by_pool(table, rows):
            features = table_features(request, table, None if every_row and len(group) == n else group)
            try:
                batch = context.predictor.predict(pool_key, features)  # type: ignore[union-attr]
            except PredictionUnavailable as err:
                for i in group.tolist():
                    reasons[i] = err.reason
                continue
            usable, values = _usable(batch, len(group))
            if not usable.all():
                for i in group[~usable].tolist():
                    reasons[i] = "prediction-failed"
                group, values = group[usable], [column[usable] for column in values]
                if not len(group):
                    continue
            predicted[group] = True
            ttft[group], tpot[group] = values[0], values[1]
            if tpot_factor is not None:
                tpot_factor[group] = self.params.tpot_factor(context.tpot_ratios, pool_key)
            if len(values) > 2:
                e2e[group] = values[2]
            versions_used = dict(batch.versions)
            if len(group) == n:  # every row: the common case, without a loop
                reasons, versions = [None] * n, [versions_used] * n
            else:
                for i in group.tolist():
                    reasons[i], versions[i] = None, versions_used
        if not predicted.any():  # every row falls back: no prediction to correct or hold to an SLO (all NaN)
            return cands.with_predictions(predicted, ttft, tpot, e2e, ttft, tpot, tuple(reasons), tuple(versions))
        correction = None
        if self.params.latency_correction and table.latency_correction.any():
            correction = table.latency_correction
            factors = np.exp(correction)
            ttft, tpot, e2e = ttft * factors[0], tpot * factors[1], e2e * factors[2]
        if self.params.prefill_floor and table.prefill_ms_per_token.any():
            ttft, e2e, correction = _prefill_floor(request, table, ttft, e2e, correction)
        ttft_headroom, tpot_headroom = self._headroom(request, table, predicted, ttft, tpot, e2e,
                                                      1.0 if tpot_factor is None else tpot_factor)
        return cands.with_predictions(predicted, ttft, tpot, e2e, ttft_headroom, tpot_headroom, tuple(reasons),
                                      tuple(versions), correction)

    def _headroom(self, request: Request, table: ServerTable, predicted: np.ndarray, ttft: np.ndarray,
                  tpot: np.ndarray, e2e: np.ndarray, tpot_factor: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """TTFT and TPOT headroom per row (NaN where it does not apply); ``tpot_factor`` divides the TPOT SLO."""
        missing = np.full(len(table), math.nan)
        if not request.has_slo:
            return missing, missing
        ttft_headroom = missing
        if request.slo_ttft_ms is not None:
            first_ms = response_ms(request.stream, ttft, e2e)
            ttft_headroom = np.where(predicted, request.slo_ttft_ms - first_ms, math.nan)
        tpot_headroom = missing
        if request.stream:
            own = math.nan if request.slo_tpot_ms is None else request.slo_tpot_ms
            slo = np.fmin(own, table.tightest_tpot_slo_ms)  # NaN only where neither applies
            tpot_headroom = np.where(predicted, slo * self.params.slo_buffer_factor / tpot_factor - tpot, math.nan)
        return ttft_headroom, tpot_headroom


def _prefill_floor(request: Request, table: ServerTable, ttft: np.ndarray, e2e: np.ndarray,
                   correction: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """TTFT and E2E raised to the prefill pace times the work ahead where they were below it, and the log
    factors per target that include what was raised."""
    state = table.state
    floor = table.prefill_ms_per_token * prefill_work(request.prompt_tokens, state["inflight_prefill_tokens"],
                                                      state["prefix_match"])
    raised_ttft, raised_e2e = (floor > ttft) & (ttft > 0), (floor > e2e) & (e2e > 0)  # NaN compares False
    if not (raised_ttft.any() or raised_e2e.any()):
        return ttft, e2e, correction
    with np.errstate(divide="ignore", invalid="ignore"):  # the rows not raised are left out
        ttft_ratio = np.where(raised_ttft, floor / ttft, math.nan)
        e2e_ratio = np.where(raised_e2e, floor / e2e, math.nan)
    return (np.where(raised_ttft, floor, ttft), np.where(raised_e2e, floor, e2e),
            floor_corrections(correction, ttft_ratio, e2e_ratio))


def floor_corrections(correction: np.ndarray | None, ttft_ratio: np.ndarray, e2e_ratio: np.ndarray) -> np.ndarray:
    """The log factors per target the predictions were corrected by: ``correction`` (None: none) and, where the
    prefill floor raised a TTFT or an E2E, the log of the floor's ratio to it (the ratios are NaN elsewhere)."""
    log_factors = np.zeros((len(TARGETS), len(ttft_ratio))) if correction is None else correction.copy()
    log_factors[0] += np.where(np.isnan(ttft_ratio), 0.0, np.log(ttft_ratio))
    log_factors[2] += np.where(np.isnan(e2e_ratio), 0.0, np.log(e2e_ratio))
    return log_factors


def _by_pool(table: ServerTable, rows: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """``rows`` grouped by pool key, in order of first appearance."""
    if not len(rows):
        return []
    keys = table.pool_key
    first = keys[int(rows[0])]
    if keys.count(first) == len(keys):
        return [(first, rows)]
    groups: dict[str, list[int]] = {}
    for i in rows.tolist():
        groups.setdefault(keys[i], []).append(i)
    return [(key, np.array(members, dtype=np.intp)) for key, members in groups.items()]


def _usable(batch: Any, n: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Which rows have a prediction (ok and every value a finite, non-negative latency), and the ttft, tpot
    (and e2e, when given) columns."""
    values: Mapping[str, Any] = batch.values
    if "ttft" not in values or "tpot" not in values:
        return np.zeros(n, dtype=bool), []
    columns = np.array([values[t] for t in TARGETS if t in values], dtype=np.float64).reshape(-1, n)
    usable = np.asarray(batch.ok, dtype=bool) & (np.isfinite(columns) & (columns >= 0)).all(axis=0)
    return usable, list(columns)


def build(name: str, raw: Mapping[str, Any] | None = None) -> PredictedLatencyProducer:
    return PredictedLatencyProducer(name, build_params(Params, raw, name))
