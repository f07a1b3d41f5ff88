"""The predicted-latency producer's compiled twin, for models in this process.

When the router's predictor is an :class:`~router.framework.predictors.EmbeddedPredictor` and the candidates are
every server of the table, all of one pool with fresh metrics, :class:`CompiledProducer` predicts them in two calls
into ``headroom._native``: ``Forests.predict_columns`` builds the feature rows (the arithmetic of
:func:`contract.features.feature_matrix`) and walks the pool's forests; the runtime maps the outputs to milliseconds
with NumPy, as it does for the plugin; ``finish_predictions`` checks, corrects, floors and holds them to the
request's SLOs. Each step is the plugin's (:mod:`router.framework.plugins.predicted_latency_producer`) operation for
operation; its exponentials and logarithms stay NumPy's. So the predictions, headroom, versions and corrections are
the plugin's to the bit.

Without a predictor, every candidate is left unpredicted for the plugin's reasons, as cheaply as that can be done.
Anything else returns None and the plugin produces: a remote predictor, several pools, a stale or non-finite scrape,
no model for the pool (the plugin names the reason), a server without a usable prediction, or a batch large enough
for the runtime's threads.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from headroom.contract.features import RAW_COLUMNS, REQUEST_FIELDS
from headroom.predictor.kernels import MIN_ROWS_PER_THREAD
from headroom.router.framework.candidate_set import NO_VERSIONS, CandidateSet
from headroom.router.framework.plugins.predicted_latency_producer import PredictedLatencyProducer, floor_corrections
from headroom.router.framework.predictors import EmbeddedPredictor
from headroom.router.framework.roles import Context, Request
from headroom.router.framework.server_table import ServerTable

# where the derived features come from among the raw columns
_DERIVED = (RAW_COLUMNS.index("prompt_tokens"), RAW_COLUMNS.index("prefix_match"), RAW_COLUMNS.index("num_waiting"))
_RAW = tuple((name, name in REQUEST_FIELDS) for name in RAW_COLUMNS)  # each raw column, and whether the request's
# the rows ``finish_predictions`` writes: TTFT, TPOT, E2E, TTFT and TPOT headroom, the floor's TTFT and E2E ratios
_FINISHED_ROWS = 7
_UNAVAILABLE = "predictor-unavailable"  # the plugin's reason for a candidate when there is no predictor


class CompiledProducer:
    """Predictions for the candidates of one pool (:func:`compiled_producer` builds one)."""

    def __init__(self, producer: PredictedLatencyProducer, finish: Any):
        self.params = producer.params
        self.finish = finish
        # the last pool and objective seen, the rows of their models and versions
        self._layout: tuple[Any, str, tuple[int, int, int | None] | None, dict[str, int]] | None = None

    def produce(self, request: Request, candidates: CandidateSet, context: Context) -> CandidateSet | None:
        """``candidates`` with the plugin's predictions, or None when the plugin must produce them."""
        predictor = context.predictor
        table = candidates.servers
        n, keys = len(table), table.pool_key
        if candidates.rows is not None:
            return None
        if predictor is None:
            return self._unpredicted(candidates)
        if type(predictor) is not EmbeddedPredictor or keys.count(keys[0]) != n or self._stale(table) is not None:
            return None
        params = self.params
        runtime = predictor.runtime
        pool = runtime.pool(keys[0])
        if pool is None or (runtime.threads > 1 and n >= 2 * MIN_ROWS_PER_THREAD):
            return None
        layout = self._targets(pool, predictor.objective)
        if layout is None:
            return None
        rows, versions = layout
        state = table.state
        values = np.empty((len(pool.models), n), dtype=np.float32)
        columns = [getattr(request, name) if of_request else state[name] for name, of_request in _RAW]
        if not pool.stack.compiled.predict_columns(columns, n, _DERIVED, values):
            return None
        pool.to_milliseconds(values)
        correction = table.latency_correction if params.latency_correction and np.count_nonzero(
            table.latency_correction) else None
        floor = (table.prefill_ms_per_token, state["inflight_prefill_tokens"], state["prefix_match"]) \
            if params.prefill_floor and np.count_nonzero(table.prefill_ms_per_token) else None
        calibrating = bool(params.tpot_quantile) and request.stream and request.has_slo
        tpot_factor = params.tpot_factor(context.tpot_ratios, keys[0]) if calibrating else 1.0
        out = np.empty((_FINISHED_ROWS, n))
        raised = self.finish(values, rows, None if correction is None else np.exp(correction), floor,
                             request.prompt_tokens, table.tightest_tpot_slo_ms, request.slo_ttft_ms,
                             request.slo_tpot_ms, request.has_slo, request.stream, params.slo_buffer_factor,
                             tpot_factor, out)
        if raised is None:
            return None
        ttft, tpot, e2e, ttft_headroom, tpot_headroom, ttft_ratio, e2e_ratio = out
        if raised:
            correction = floor_corrections(correction, ttft_ratio, e2e_ratio)
        return candidates.with_predictions(np.ones(n, dtype=bool), ttft, tpot, e2e, ttft_headroom, tpot_headroom,
                                           (None,) * n, (dict(versions),) * n, correction)

    def _unpredicted(self, candidates: CandidateSet) -> CandidateSet:
        """Without a predictor: every candidate unpredicted, for the plugin's reasons (stale metrics first)."""
        n = len(candidates)
        stale = self._stale(candidates.servers)
        reasons = (_UNAVAILABLE,) * n if stale is None else tuple(
            "stale-metrics" if old else _UNAVAILABLE for old in stale.tolist())
        missing = np.full(n, math.nan)
        return candidates.with_predictions(np.zeros(n, dtype=bool), missing, missing, missing, missing, missing,
                                           reasons, (NO_VERSIONS,) * n)

    def _stale(self, table: ServerTable) -> np.ndarray | None:
        """Per server, whether its metrics are older than the producer predicts from (None: none is)."""
        max_age_ms = self.params.max_metrics_age_ms
        if not max_age_ms:
            return None
        stale = table.metrics_age_s > max_age_ms / 1000.0
        return stale if np.count_nonzero(stale) else None

    def _targets(self, pool: Any, objective: str) -> tuple[tuple[int, int, int | None], dict[str, int]] | None:
        """The rows of the pool's TTFT, TPOT and E2E models of ``objective`` and their versions (None without a
        TTFT or TPOT model); kept for the last pool and objective."""
        layout = self._layout
        if layout is None or layout[0] is not pool or layout[1] != objective:
            found = {m.target: (i, m.version) for i, m in enumerate(pool.models) if m.objective == objective}
            rows = None if "ttft" not in found or "tpot" not in found else (
                found["ttft"][0], found["tpot"][0], found["e2e"][0] if "e2e" in found else None)
            layout = self._layout = (pool, objective, rows, {target: version for target, (_, version) in found.items()})
        _, _, rows, versions = layout
        return None if rows is None else (rows, versions)


def compiled_producer(producer: Any) -> CompiledProducer | None:
    """The compiled twin of ``producer``, or None when it has none (or the compiled part is not built)."""
    if type(producer) is not PredictedLatencyProducer:
        return None
    try:
        from headroom import _native
    except ImportError:  # a source tree never installed: the plugin produces
        return None
    return CompiledProducer(producer, _native.finish_predictions)

