"""From the metrics' desired count to the count the controller writes: stabilization and rate limits.

Two paths, as in Kubernetes:

- **legacy** (the HPA has no ``behavior``): stabilized = max(desired, every recommendation of the
  last downscale-stabilization window); then clamp to ``[min, min(max, max(factor·current, 4))]``.
- **behavior**: up = min(desired, recommendations inside the scale-up window), down = max(desired,
  recommendations inside the scale-down window), recommendation = current brought inside [up, down];
  then each direction's policies limit the change relative to the count at the start of each policy's
  period (current − scale-ups + scale-downs inside that period), ``selectPolicy`` picks among them,
  and the result is clamped to current and to [min, max].

History is passed in and returned, never held here; ``now`` is explicit. Time comparisons keep
Kubernetes' strictness: the legacy window keeps records at exactly ``now − window``; the behavior
windows and policy periods keep only records strictly after their cutoff.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from headroom.autoscale.spec import PolicyType, ScalingPolicy, ScalingRules, SelectPolicy

LEGACY_SCALE_UP_FACTOR = 2.0
LEGACY_SCALE_UP_MINIMUM = 4.0


@dataclass(frozen=True)
class Recommendation:
    """A desired count as computed from the metrics at time ``at`` (before normalization)."""

    replicas: int
    at: float


@dataclass(frozen=True)
class ScaleEvent:
    """A rescale of ``change`` pods (always positive) in one direction at time ``at``."""

    change: int
    at: float
    outdated: bool = False


def stabilize_legacy(history: Sequence[Recommendation], desired: int, now: float,
                     window: float) -> tuple[int, tuple[Recommendation, ...]]:
    """Max of ``desired`` and the recommendations of the last ``window`` seconds; records ``desired``."""
    cutoff = now - window
    highest = desired
    old_index = None
    for index, rec in enumerate(history):
        if rec.at < cutoff:
            old_index = index
        elif rec.replicas > highest:
            highest = rec.replicas
    return highest, _record(history, old_index, Recommendation(desired, now))


def stabilize_with_behavior(history: Sequence[Recommendation], desired: int, current: int, now: float,
                            up_window: float, down_window: float) -> tuple[int, tuple[Recommendation, ...]]:
    """Bring ``current`` inside [min over the up window, max over the down window]; records ``desired``."""
    up_cutoff, down_cutoff = now - up_window, now - down_window
    up_limit = down_limit = desired
    old_index = None
    for index, rec in enumerate(history):
        if rec.at > up_cutoff:
            up_limit = min(rec.replicas, up_limit)
        if rec.at > down_cutoff:
            down_limit = max(rec.replicas, down_limit)
        if rec.at < up_cutoff and rec.at < down_cutoff:
            old_index = index
    recommendation = min(max(current, up_limit), down_limit)
    return recommendation, _record(history, old_index, Recommendation(desired, now))


def legacy_limits(current: int, desired: int, min_replicas: int, max_replicas: int,
                  scale_up_factor: float = LEGACY_SCALE_UP_FACTOR) -> int:
    """Clamp to ``[min, min(max, max(factor·current, 4))]`` (``convertDesiredReplicasWithRules``)."""
    scale_up_limit = int(max(scale_up_factor * current, LEGACY_SCALE_UP_MINIMUM))
    maximum = min(max_replicas, scale_up_limit)
    if desired < min_replicas:
        return min_replicas
    if desired > maximum:
        return maximum
    return desired


def replicas_changed_in_period(events: Sequence[ScaleEvent], period_seconds: int, now: float) -> int:
    cutoff = now - period_seconds
    return sum(event.change for event in events if event.at > cutoff)


def scale_up_limit(current: int, up_events: Sequence[ScaleEvent], down_events: Sequence[ScaleEvent],
                   rules: ScalingRules, now: float) -> int:
    """The highest count the scale-up policies allow now."""
    proposals = _proposals(current, up_events, down_events, rules, now, lambda start, policy: (
        start + policy.value if policy.type is PolicyType.PODS else math.ceil(start * (1 + policy.value / 100))))
    return min(proposals) if rules.select_policy is SelectPolicy.MIN else max(proposals)


def scale_down_limit(current: int, up_events: Sequence[ScaleEvent], down_events: Sequence[ScaleEvent],
                     rules: ScalingRules, now: float) -> int:
    """The lowest count the scale-down policies allow now."""
    proposals = _proposals(current, up_events, down_events, rules, now, lambda start, policy: (
        start - policy.value if policy.type is PolicyType.PODS else int(start * (1 - policy.value / 100))))
    return max(proposals) if rules.select_policy is SelectPolicy.MIN else min(proposals)


def _proposals(current: int, up_events: Sequence[ScaleEvent], down_events: Sequence[ScaleEvent],
               rules: ScalingRules, now: float, step: Callable[[int, ScalingPolicy], int]) -> list[int]:
    """Each policy's limit: ``step`` applied to the count at the start of the policy's period."""
    if rules.select_policy is SelectPolicy.DISABLED:
        return [current]
    return [step(current - replicas_changed_in_period(up_events, policy.period_seconds, now)
                 + replicas_changed_in_period(down_events, policy.period_seconds, now), policy)
            for policy in rules.policies]


def behavior_limits(current: int, desired: int, min_replicas: int, max_replicas: int,
                    up_events: Sequence[ScaleEvent], down_events: Sequence[ScaleEvent],
                    scale_up: ScalingRules, scale_down: ScalingRules, now: float) -> int:
    """Apply the policies' rate limits and [min, max] (``convertDesiredReplicasWithBehaviorRate``)."""
    if desired > current:
        limit = max(scale_up_limit(current, up_events, down_events, scale_up, now), current)
        return min(desired, max_replicas, limit)
    if desired < current:
        limit = min(scale_down_limit(current, up_events, down_events, scale_down, now), current)
        return max(desired, min_replicas, limit)
    return desired


def record_scale_event(events: Sequence[ScaleEvent], change: int, longest_period_seconds: int,
                       now: float) -> tuple[ScaleEvent, ...]:
    """Store a scale event, reusing the slot of the last one older than the longest policy period."""
    cutoff = now - longest_period_seconds
    marked = [replace(e, outdated=True) if e.at < cutoff else e for e in events]
    old_index = None
    for index, event in enumerate(marked):
        if event.outdated:
            old_index = index
    new_event = ScaleEvent(change, now)
    if old_index is None:
        return (*marked, new_event)
    marked[old_index] = new_event
    return tuple(marked)


def _record(history: Sequence[Recommendation], old_index: int | None,
            new: Recommendation) -> tuple[Recommendation, ...]:
    if old_index is None:
        return (*history, new)
    updated = list(history)
    updated[old_index] = new
    return tuple(updated)
