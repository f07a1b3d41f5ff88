"""The compiled twin of a profile: the heuristic profile's default pipeline as one call into ``headroom._native``.

A profile made only of the scorers ``kv-cache-free-scorer``, ``queue-scorer`` and ``prefix-match-scorer`` (any
order and weights) and a ``weighted-random-picker`` of sharpness 1 — no producer, filter or admitter
— is scored and picked by :class:`headroom._native.HeuristicProfile`, reading the candidates' state columns in place:
the same clamped weighted mean, the same draws from the same ``context.rng`` in the same order, so the same scores
and the same pick as the plugins'. Any other profile, or a tree where the compiled part is not built, stays with
the Python plugins. The engine asks once, when it is built for a pipeline.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from headroom.router.framework.candidate_set import CandidateSet
from headroom.router.framework.pipeline import Profile
from headroom.router.framework.plugins import (
                            kv_cache_free_scorer,
                            prefix_match_scorer,
                            queue_scorer,
                            weighted_random_picker,
)
from headroom.router.framework.roles import Context

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


def _contiguous(column: np.ndarray) -> np.ndarray:
    """``column`` as a contiguous float64 array (a copy only when it is not one already)."""
    return column if column.flags.c_contiguous and column.dtype == np.float64 else np.ascontiguousarray(column,
                                                                                                        np.float64)
