"""The scheduling engine: runs a profile's producer → filters → scorers → admitter → picker.

Which profile: a request that does not ask for prediction takes the heuristic profile. One that does
takes the predicted profile, whose producer predicts per candidate. When no candidate could be
predicted (predictor unavailable, no model for the pool yet, stale metrics, ...), the whole request
falls back to the heuristic profile; when only some could, those few are scored by the heuristic
profile's scorers and the rest by the predicted profile's (degraded per candidate). Either way the
decision lists the fallback reasons, so callers count every fallback by reason.

The engine, not plugins, clamps every score to [0, 1] (NaN → 0) and takes the weighted mean over a
profile's scorers. The admitter sees every produced candidate (before filtering), so exploration in a
filter never causes a rejection.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from router.errors import NoCandidates
from router.pipeline import Pipeline, Profile
from router.roles import Candidate, Context, Request, Scored, ServerSnapshot


@dataclass(frozen=True)
class Decision:
    """The outcome of scheduling one request."""

    request: Request
    profile: str
    candidates: tuple[Candidate, ...]  # every candidate after prediction
    scored: tuple[Scored, ...]  # survivors of filtering with their scores
    chosen: Candidate | None  # None when rejected
    fallback: str | None = None  # None, "partial" (some candidates) or "full" (the whole request)
    fallback_reasons: tuple[str, ...] = ()
    rejection: str | None = None  # why admission rejected the request


class Engine:
    """Schedules requests with a :class:`~router.pipeline.Pipeline`."""

    def __init__(self, pipeline: Pipeline):
        self.pipeline = pipeline

    def wants_prediction(self, opted_in: bool, opted_out: bool) -> bool:
        """Whether a request with these header choices takes the predicted profile."""
        return (self.pipeline.predict_all or opted_in) and not opted_out

    def decide(self, request: Request, servers: Sequence[ServerSnapshot], context: Context) -> Decision:
        if not servers:
            raise NoCandidates("no servers are available")
        candidates = tuple([Candidate(s) for s in servers])
        heuristic, predicted = self.pipeline.heuristic, self.pipeline.predicted
        if not request.predict:
            return self._run(heuristic, heuristic, request, candidates, context)
        produced = predicted.producer.produce(request, candidates, context)  # type: ignore[union-attr]
        reasons = tuple(sorted({c.fallback_reason for c in produced if c.fallback_reason}))
        if all(c.prediction is None for c in produced):
            decision = self._run(heuristic, heuristic, request, produced, context)
            return _with_fallback(decision, "full", reasons)
        decision = self._run(predicted, heuristic, request, produced, context)
        return _with_fallback(decision, "partial", reasons) if reasons else decision

    def _run(self, profile: Profile, heuristic: Profile, request: Request, candidates: tuple[Candidate, ...],
             context: Context) -> Decision:
        survivors = candidates
        for plugin in profile.filters:
            kept = plugin.filter(request, survivors, context)
            survivors = kept if kept else survivors  # a filter may narrow, never empty
        scores = [0.0] * len(survivors)
        groups = [(profile, [i for i, c in enumerate(survivors) if c.predicted or profile is heuristic])]
        if profile is not heuristic:
            groups.append((heuristic, [i for i, c in enumerate(survivors) if not c.predicted]))
        for scoring, rows in groups:
            for i, value in zip(rows, _weighted(scoring, request, [survivors[i] for i in rows])):
                scores[i] = value
        scored = tuple(Scored(c, s) for c, s in zip(survivors, scores))
        rejection = profile.admitter.admit(request, candidates) if profile.admitter else None
        if rejection is not None:
            return Decision(request, profile.name, candidates, scored, None, rejection=rejection)
        chosen = profile.picker.pick(scored, context)
        return Decision(request, profile.name, candidates, scored, chosen.candidate)


def _weighted(profile: Profile, request: Request, candidates: Sequence[Candidate]) -> list[float]:
    if not candidates:
        return []
    if not profile.scorers:
        return [1.0] * len(candidates)
    total = [0.0] * len(candidates)
    weight_sum = 0.0
    for scorer, weight in profile.scorers:
        raw = scorer.score(request, candidates)
        if len(raw) != len(candidates):
            raise ValueError(f"scorer {scorer.name!r} returned {len(raw)} scores for {len(candidates)} candidates")
        total = [t + weight * _clamp(v) for t, v in zip(total, raw)]
        weight_sum += weight
    return [t / weight_sum for t in total]


def _clamp(value: float) -> float:
    """``value`` limited to [0, 1]; NaN counts as 0 (+inf as 1)."""
    if value >= 1.0:
        return 1.0
    return value if value > 0.0 else 0.0  # also maps NaN to 0


def _with_fallback(decision: Decision, scope: str, reasons: tuple[str, ...]) -> Decision:
    return replace(decision, fallback=scope, fallback_reasons=reasons)
