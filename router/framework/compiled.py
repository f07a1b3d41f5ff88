"""The compiled twins of profiles: the default pipeline's profiles as one call into ``headroom._native`` each.

A profile made only of the scorers ``kv-cache-free-scorer``, ``queue-scorer`` and ``prefix-match-scorer`` (any
order and weights) and a ``weighted-random-picker`` of sharpness 1 — no producer, filter or admitter
— is scored and picked by :class:`headroom._native.HeuristicProfile`, reading the candidates' state columns in place:
the same clamped weighted mean, the same draws from the same ``context.rng`` in the same order, so the same scores
and the same pick as the plugins'. Any other profile, or a tree where the compiled part is not built, stays with
the Python plugins. The engine asks once, when it is built for a pipeline.

The predicted profile's twin, likewise: a profile whose filters are any of the prefix-affinity, SLO-tier,
late-concentration and TPOT-protection filters, whose scorers are latency scorers, with or without the SLO admitter,
and a max-score picker, is filtered, scored, admitted and picked by :class:`headroom._native.PredictedProfile` once
its producer has predicted every candidate (a request with some candidates unpredicted stays with the plugins).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from headroom.router.framework.candidate_set import CandidateSet
from headroom.router.framework.pipeline import Profile
from headroom.router.framework.plugins import (
                            kv_cache_free_scorer,
                            late_concentration_filter,
                            latency_scorer,
                            latency_slo_admitter,
                            max_score_picker,
                            prefix_cache_affinity_filter,
                            prefix_match_scorer,
                            queue_scorer,
                            slo_headroom_tier_filter,
                            tpot_protection_filter,
                            weighted_random_picker,
)
from headroom.router.framework.roles import COLD_KV_USAGE, Context, Request

_SCORERS = {kv_cache_free_scorer.KvCacheFreeScorer: "kv-cache-free", queue_scorer.QueueScorer: "queue",
            prefix_match_scorer.PrefixMatchScorer: "prefix-match"}


class CompiledHeuristic:
    """Scores and picks for a profile of the shape above (:func:`compiled_heuristic` builds one)."""

    def __init__(self, native: Any):
        self.native = native

    def pick(self, candidates: CandidateSet, context: Context) -> tuple[np.ndarray, int]:
        """The candidates' scores, and the position of the one picked."""
        scores = np.empty(len(candidates))
        index = self.native.pick(_contiguous(candidates.server_column("kv_cache_usage")),
                                 _contiguous(candidates.server_column("num_waiting")),
                                 _contiguous(candidates.server_column("prefix_match")), scores, context.rng)
        return scores, index


def compiled_heuristic(profile: Profile) -> CompiledHeuristic | None:
    """The compiled twin of ``profile``, or None when it has none (or the compiled part is not built)."""
    if profile.producer is not None or profile.filters or profile.admitter is not None or not profile.scorers:
        return None
    picker = profile.picker
    if not isinstance(picker, weighted_random_picker.WeightedRandomPicker) or picker.params.sharpness != 1.0:
        return None
    if not all(type(scorer) in _SCORERS for scorer, _ in profile.scorers):
        return None
    try:
        from headroom import _native
    except ImportError:  # a source tree never installed: the Python plugins decide
        return None
    return CompiledHeuristic(_native.HeuristicProfile([(_SCORERS[type(scorer)], weight)
                                                       for scorer, weight in profile.scorers]))


class CompiledPredicted:
    """Filters, scores, admits and picks for a predicted profile of the shape above (:func:`compiled_predicted`)."""

    def __init__(self, native: Any):
        self.native = native

    def decide(self, request: Request, candidates: CandidateSet,
               context: Context) -> tuple[CandidateSet, np.ndarray, int | None, str | None]:
        """The survivors of the filters, their scores, the position of the one picked (None when rejected) and
        why it was rejected, for ``candidates`` that all have predictions."""
        n = len(candidates)
        positions, scores = np.empty(n, dtype=np.intp), np.empty(n)
        state = candidates.server_column
        kept, index, some_meet = self.native.decide(
            *(_contiguous(candidates.column(by_row)) for by_row in (
                candidates.ttft_ms, candidates.tpot_ms, candidates.e2e_ms, candidates.ttft_headroom_ms_by_row,
                candidates.tpot_headroom_ms_by_row)),
            *(_contiguous(state(name)) for name in ("prefix_match", "inflight_prefill_tokens")),
            _contiguous(candidates.tpot_at_risk),
            *(_contiguous(state(name)) for name in ("num_waiting", "num_running", "inflight_requests",
                                                    "kv_cache_usage")),
            COLD_KV_USAGE, request.slo_ttft_ms, request.has_slo, request.stream, request.sheddable, positions, scores,
            context.rng)
        survivors = candidates if kept == n else candidates.take(positions[:kept])  # kept == n: none moved
        rejection = None if index is not None else latency_slo_admitter.rejection(request, n, some_meet)
        return survivors, scores[:kept], index, rejection


# the filters the predicted twin runs: each one's kind and the parameters it takes, in order
_FILTERS: dict[type, tuple[str, tuple[str, ...]]] = {
    prefix_cache_affinity_filter.PrefixCacheAffinityFilter: (
        "affinity", ("affinity_threshold", "strict_threshold", "exploration_probability", "max_ttft_penalty_ms")),
    slo_headroom_tier_filter.SloHeadroomTierFilter: ("tiers", ("epsilon_explore_neg",)),
    late_concentration_filter.LateConcentrationFilter: (
        "concentrate", ("late_margin", "include_tpot", "only_in_a_burst", "late_cap", "late_slack")),
    tpot_protection_filter.TpotProtectionFilter: ("protect", ("tolerance", "ttft_margin", "ttft_penalty")),
}


def _filter(plugin: Any) -> tuple[str, list[float]]:
    """A filter's kind and parameters, as the predicted twin takes them (flags as 0 or 1)."""
    kind, names = _FILTERS[type(plugin)]
    return kind, [float(getattr(plugin.params, name)) for name in names]


_LATENCY_SCORERS: frozenset[type] = frozenset({latency_scorer.LatencyScorer})  # the predicted twin's scorers


def _latency_scorer(plugin: Any, weight: float) -> tuple[bool, float, float, float]:
    """A latency scorer's parameters and weight, as the predicted twin takes them."""
    p = plugin.params
    return p.headroom_selection_strategy == "most", p.ttft_weight, p.tpot_weight, weight


def compiled_predicted(profile: Profile) -> CompiledPredicted | None:
    """The compiled twin of the predicted ``profile``'s steps after its producer, or None when it has none."""
    admitter, picker = profile.admitter, profile.picker
    if not isinstance(picker, max_score_picker.MaxScorePicker) or not profile.scorers:
        return None
    if not all(type(scorer) in _LATENCY_SCORERS for scorer, _ in profile.scorers):
        return None
    if not all(type(f) in _FILTERS for f in profile.filters):
        return None
    if admitter is not None and not isinstance(admitter, latency_slo_admitter.LatencySloAdmitter):
        return None
    try:
        from headroom import _native
    except ImportError:  # a source tree never installed: the Python plugins decide
        return None
    return CompiledPredicted(_native.PredictedProfile(
        [_filter(f) for f in profile.filters],
        [_latency_scorer(scorer, weight) for scorer, weight in profile.scorers],
        None if admitter is None else admitter.params.protect_running, picker.params.tie_tolerance))


def _contiguous(column: np.ndarray) -> np.ndarray:
    """``column`` as a contiguous float64 array (a copy only when it is not one already)."""
    return column if column.flags.c_contiguous and column.dtype == np.float64 else np.ascontiguousarray(column,
                                                                                                        np.float64)
