"""The scheduling engine: runs a profile's producer → filters → scorers → admitter → picker.

A request without SLO headers is first held to the pool's default SLO, when the pipeline has one (the
decision's ``request`` carries the SLOs it was scheduled for). Which profile: every request takes the
predicted profile, whose producer predicts per candidate, unless
it opted out (or, on a router configured to predict only requests that opt in, did not opt in). When no
candidate could be predicted (warm-up, predictor unavailable, no model for the pool, stale metrics, ...),
the whole request falls back to the heuristic profile; when only some could, those few are scored by the
heuristic profile's scorers, each against all the candidates (a server's queue is long or short among them all),
and the rest by the predicted profile's (degraded per candidate). A decision
the heuristic profile made carries one ``heuristic_reason`` (:data:`HEURISTIC_REASONS` orders them);
one the predicted profile made with some candidates degraded lists their ``fallback_reasons``.

The engine, not plugins, clamps every score to [0, 1] (NaN → 0) and takes the weighted mean over a
profile's scorers. The admitter sees every produced candidate (before filtering), so exploration in a
filter never causes a rejection.

Candidates travel through the pipeline as one :class:`~router.framework.candidate_set.CandidateSet` (columns over
the servers' :class:`~router.framework.server_table.ServerTable`), scores as arrays: no object is built per
candidate. A :class:`~router.framework.roles.Candidate` is built for the chosen server, and for any other only when
someone reads the decision's ``candidates`` or ``scored``. A heuristic profile that is the default pipeline's
shape is scored and picked by its compiled twin (:mod:`router.framework.compiled`), with the same scores and picks;
so is a predicted profile of the default pipeline's shape, once every candidate is predicted. With models in this
process, the predicted-latency producer's twin (:mod:`router.framework.compiled_producer`) predicts a pool's
candidates when it can.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from headroom.router.errors import NoCandidates
from headroom.router.framework.candidate_set import CandidateSet, ScoredSet
from headroom.router.framework.compiled import compiled_heuristic, compiled_predicted
from headroom.router.framework.compiled_producer import compiled_producer
from headroom.router.framework.pipeline import Pipeline, Profile
from headroom.router.framework.roles import Candidate, Context, Held, Holder, Request, Scored, ServerSnapshot


@dataclass(frozen=True)
class Decision:
    """The outcome of scheduling one request."""

    request: Request
    profile: str
    candidates: Sequence[Candidate]  # every candidate after prediction
    scored: Sequence[Scored]  # survivors of filtering with their scores
    chosen: Candidate | None  # None when rejected
    fallback: str | None = None  # None, "partial" (some candidates) or "full" (the whole request)
    fallback_reasons: tuple[str, ...] = ()
    rejection: str | None = None  # why admission rejected the request
    heuristic_reason: str | None = None  # why the heuristic profile decided (None when the predicted one did)
    held: Held | None = None  # the router should hold the request and decide again later (chosen is None)


# Why the heuristic profile made a decision. A request no candidate of which could be predicted is
# counted under the first of its candidates' reasons in this order; the predictor's reasons come from
# :class:`~router.errors.PredictionUnavailable`, the producer's own from its docstring.
HEURISTIC_REASONS = ("opted-out", "not-opted-in", "warm-up", "predictor-unavailable", "no-model-for-pool",
                     "stale-metrics", "prediction-failed", "invalid-batch")
_RANK = {reason: i for i, reason in enumerate(HEURISTIC_REASONS)}


class Engine:
    """Schedules requests with a :class:`~router.framework.pipeline.Pipeline`."""

    def __init__(self, pipeline: Pipeline, compiled: bool = True):
        self.pipeline = pipeline
        # the profiles' compiled twins, when they have them (``compiled=False``: always the Python plugins)
        self.compiled = compiled_heuristic(pipeline.heuristic) if compiled else None
        self.compiled_predicted = compiled_predicted(pipeline.predicted) if compiled else None
        self.compiled_producer = compiled_producer(pipeline.predicted.producer) if compiled else None
        self.holders = tuple(f for f in pipeline.predicted.filters if isinstance(f, Holder))

    def wants_prediction(self, opted_in: bool, opted_out: bool) -> bool:
        """Whether a request with these header choices takes the predicted profile: every request unless it
        opts out, or on a router that predicts only on request, one that opts in and not out."""
        return (self.pipeline.predict_all or opted_in) and not opted_out

    def decide(self, request: Request, servers: Sequence[ServerSnapshot], context: Context) -> Decision:
        """Schedule ``request`` over ``servers`` (snapshots, or a :class:`~router.framework.server_table.ServerTable`)."""
        if not len(servers):
            raise NoCandidates("no servers are available")
        request = self.pipeline.with_default_slo(request)
        candidates = CandidateSet.unpredicted(servers)
        heuristic, predicted = self.pipeline.heuristic, self.pipeline.predicted
        if not request.predict:
            return self._run(heuristic, heuristic, request, candidates, context,
                             heuristic_reason="opted-out" if self.pipeline.predict_all else "not-opted-in")
        twin = self.compiled_producer
        produced = twin.produce(request, candidates, context) if twin is not None else None
        if produced is None:
            produced = CandidateSet.of(predicted.producer.produce(request, candidates, context))  # type: ignore[union-attr]
        reasons = tuple(sorted({r for r in produced.fallback_reasons() if r}))
        if not np.count_nonzero(produced.is_predicted):
            return self._run(heuristic, heuristic, request, produced, context, fallback="full",
                             fallback_reasons=reasons, heuristic_reason=_first_reason(reasons))
        return self._run(predicted, heuristic, request, produced, context, fallback="partial" if reasons else None,
                         fallback_reasons=reasons)

    def _run(self, profile: Profile, heuristic: Profile, request: Request, candidates: CandidateSet,
             context: Context, **outcome: Any) -> Decision:
        """The decision of ``profile`` (``heuristic`` scoring its unpredicted candidates); ``outcome``: the
        :class:`Decision`'s fallback fields."""
        if profile is heuristic and self.compiled is not None:  # no filter, scorer or admitter of its own to run
            scores, index = self.compiled.pick(candidates, context)
            return Decision(request, profile.name, candidates, ScoredSet(candidates, scores), candidates[index],
                            **outcome)
        if profile is not heuristic and request.holdable:
            for holder in self.holders:
                if (held := holder.hold(request, candidates)) is not None:
                    return Decision(request, profile.name, candidates, ScoredSet(candidates, np.zeros(len(candidates))),
                                    None, held=held, **outcome)
        if profile is not heuristic and self.compiled_predicted is not None and candidates.is_predicted.all():
            survivors, scores, picked, rejection = self.compiled_predicted.decide(request, candidates, context)
            return Decision(request, profile.name, candidates, ScoredSet(survivors, scores),
                            None if picked is None else survivors[picked], rejection=rejection, **outcome)
        survivors = candidates
        for plugin in profile.filters:
            kept = plugin.filter(request, survivors, context)
            survivors = CandidateSet.of(kept) if len(kept) else survivors  # a filter may narrow, never empty
        if profile is heuristic:
            scores = _weighted(profile, request, survivors)
        else:
            predicted = survivors.is_predicted
            if predicted.all():
                scores = _weighted(profile, request, survivors)
            else:  # the heuristic's scores of the others, each against every survivor (a queue is long among all)
                scores = _weighted(heuristic, request, survivors)
                rows = np.flatnonzero(predicted)
                if len(rows):
                    scores[rows] = _weighted(profile, request, survivors.take(rows))
        scored = ScoredSet(survivors, scores)
        rejection = profile.admitter.admit(request, candidates) if profile.admitter else None
        if rejection is not None:
            return Decision(request, profile.name, candidates, scored, None, rejection=rejection, **outcome)
        chosen = profile.picker.pick(scored, context)
        return Decision(request, profile.name, candidates, scored, chosen.candidate, **outcome)


def _weighted(profile: Profile, request: Request, candidates: CandidateSet) -> np.ndarray:
    """The weighted mean of the profile's clamped scores (1 for everyone without scorers)."""
    if not profile.scorers:
        return np.ones(len(candidates))
    total: np.ndarray | None = None
    weight_sum = 0.0
    for scorer, weight in profile.scorers:
        raw = np.asarray(scorer.score(request, candidates), dtype=np.float64)
        if raw.shape != (len(candidates),):
            raise ValueError(f"scorer {scorer.name!r} returned {raw.size} scores for {len(candidates)} candidates")
        part = _clamp(raw) if weight == 1.0 else weight * _clamp(raw)  # exactly 1 × the clamped scores
        total = part if total is None else total + part
        weight_sum += weight
    assert total is not None  # the profile has scorers
    weighted: np.ndarray = total if weight_sum == 1.0 else total / weight_sum
    return weighted


def _clamp(values: np.ndarray) -> np.ndarray:
    """``values`` limited to [0, 1]; NaN counts as 0 (+inf as 1)."""
    clamped: np.ndarray = np.fmin(np.fmax(values, 0.0), 1.0)  # fmax takes 0 over NaN
    return clamped


def _first_reason(reasons: tuple[str, ...]) -> str:
    """The reason a fully degraded request is counted under (an unknown one after the known ones)."""
    return min(reasons, key=lambda r: (_RANK.get(r, len(_RANK)), r), default="prediction-failed")
