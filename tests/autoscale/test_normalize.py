"""Normalization vectors of hpa-vectors.md (Kubernetes' horizontal_test.go): stabilization and policies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from headroom.autoscale.normalize import (
    Recommendation,
    ScaleEvent,
    behavior_limits,
    legacy_limits,
    record_scale_event,
    stabilize_legacy,
    stabilize_with_behavior,
)
from headroom.autoscale.spec import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    PolicyType,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
)

NOW = 100_000.0
MIN = 60.0


def recs(*pairs: tuple[int, float]) -> tuple[Recommendation, ...]:
    """``(replicas, minutes ago)`` pairs."""
    return tuple(Recommendation(replicas, NOW - minutes * MIN) for replicas, minutes in pairs)


LEGACY_STABILIZATION = {
    "stabilize": (recs((4, 2), (5, 1)), 3, 5),
    "no stabilize - old recommendations": (recs((10, 10), (9, 9)), 3, 3),
    "stabilize - old recommendations": (recs((10, 10), (4, 1), (5, 2), (9, 9)), 3, 5),
}


@pytest.mark.parametrize("case", LEGACY_STABILIZATION.values(), ids=LEGACY_STABILIZATION.keys())
def test_legacy_stabilization(case) -> None:
    history, desired, expected = case
    stabilized, updated = stabilize_legacy(history, desired, NOW, 300.0)
    assert stabilized == expected
    assert Recommendation(desired, NOW) in updated
    assert len(updated) == len(history) + (0 if any(r.at < NOW - 300 for r in history) else 1)


BEHAVIOR_STABILIZATION = {
    # history, current, desired, up window, down window, expected
    "scale-down stabilization": (recs((4, 2), (5, 1)), 100, 3, 0, 180, 5),
    "scale-up stabilization": (recs((4, 2), (5, 1)), 1, 7, 300, 300, 4),
    "prenormalized rec goes down": (recs((2, 100), (3, 3)), 2, 1, 300, 300, 2),
    "reuse one of obsolete": (recs((10, 100), (6, 1), (5, 2), (9, 3)), 1, 100, 300, 300, 5),
}


@pytest.mark.parametrize("case", BEHAVIOR_STABILIZATION.values(), ids=BEHAVIOR_STABILIZATION.keys())
def test_behavior_stabilization(case) -> None:
    history, current, desired, up_window, down_window, expected = case
    stabilized, updated = stabilize_with_behavior(history, desired, current, NOW, up_window, down_window)
    assert stabilized == expected
    assert updated[-1] == Recommendation(desired, NOW) or Recommendation(desired, NOW) in updated


def test_obsolete_recommendation_slot_is_reused() -> None:
    history = recs((10, 100), (6, 1), (5, 2), (9, 3))
    _, updated = stabilize_with_behavior(history, 100, 1, NOW, 300, 300)
    assert updated == (Recommendation(100, NOW), *history[1:])


def rules(*policies: tuple[PolicyType, int, int], select: SelectPolicy = SelectPolicy.MAX) -> ScalingRules:
    return ScalingRules(tuple(ScalingPolicy(*p) for p in policies), select, 0)


PODS, PERCENT = PolicyType.PODS, PolicyType.PERCENT


def events(*changes: int) -> tuple[ScaleEvent, ...]:
    """Scale events spread inside the last minute."""
    return tuple(ScaleEvent(change, NOW - 10.0 * (i + 1)) for i, change in enumerate(changes))


@dataclass(frozen=True)
class RuleCase:
    current: int
    desired: int
    expected: int
    scale_up: ScalingRules = DEFAULT_SCALE_UP
    scale_down: ScalingRules = DEFAULT_SCALE_DOWN
    min_replicas: int = 1
    max_replicas: int = 1000
    up_events: Sequence[ScaleEvent] = ()
    down_events: Sequence[ScaleEvent] = ()


RULE_CASES = {
    "default scale-up": RuleCase(10, 50, 20),
    "Pods 100/60s + Percent 100/60s": RuleCase(10, 500, 110, scale_up=rules((PODS, 100, 60), (PERCENT, 100, 60))),
    "Pods 2 + Percent 100": RuleCase(10, 500, 20, scale_up=rules((PODS, 2, 60), (PERCENT, 100, 60))),
    "Pods 30": RuleCase(10, 50, 40, scale_up=rules((PODS, 30, 60))),
    "Percent 200": RuleCase(10, 50, 30, scale_up=rules((PERCENT, 200, 60))),
    "Percent 1 / 60s": RuleCase(3, 1000, 4, scale_up=rules((PERCENT, 1, 60))),
    "scale-down Pods 20 / Percent 1": RuleCase(100, 2, 80, scale_down=rules((PODS, 20, 60), (PERCENT, 1, 60))),
    "scale-down Pods 2 / Percent 1": RuleCase(100, 2, 98, scale_down=rules((PODS, 2, 60), (PERCENT, 1, 60))),
    "scale-down Pods 5": RuleCase(10, 2, 5, scale_down=rules((PODS, 5, 60))),
    "scale-down Percent 50": RuleCase(10, 5, 5, scale_down=rules((PERCENT, 50, 60))),
    "min 5, Percent 100": RuleCase(10, 2, 5, scale_down=rules((PERCENT, 100, 60)), min_replicas=5),
    "Pods 150/120s after up events 1,5,9": RuleCase(100, 500, 235, scale_up=rules((PODS, 150, 120)),
                                                    up_events=events(1, 5, 9)),
    "Percent 200/120s after up events 1,5,9": RuleCase(100, 500, 255, scale_up=rules((PERCENT, 200, 120)),
                                                       up_events=events(1, 5, 9)),
    "Pods 5/120s after up events 1,5,9": RuleCase(100, 500, 100, scale_up=rules((PODS, 5, 120)),
                                                  up_events=events(1, 5, 9)),
    "scale-down Percent 50/180s after up 2, down 4": RuleCase(10, 1, 6, scale_down=rules((PERCENT, 50, 180)),
                                                              up_events=events(2), down_events=events(4)),
    "scale-down Percent 10/120s after down 10,10,10": RuleCase(100, 2, 100, scale_down=rules((PERCENT, 10, 120)),
                                                               down_events=events(10, 10, 10)),
    "scale-up Min policy": RuleCase(1, 10, 2, scale_up=rules((PODS, 2, 60), (PERCENT, 50, 60),
                                                             select=SelectPolicy.MIN)),
    "scale-up Disabled": RuleCase(3, 10, 3, scale_up=rules((PODS, 2, 60), select=SelectPolicy.DISABLED)),
    "max clamps before policies": RuleCase(10, 500, 12, max_replicas=12),
}


@pytest.mark.parametrize("case", RULE_CASES.values(), ids=RULE_CASES.keys())
def test_policy_rate_limits(case: RuleCase) -> None:
    limited = behavior_limits(case.current, case.desired, case.min_replicas, case.max_replicas,
                              case.up_events, case.down_events, case.scale_up, case.scale_down, NOW)
    assert limited == case.expected


@pytest.mark.parametrize("current, desired, expected", [(3, 60, 24), (1, 60, 8), (10, 2, 2)],
                         ids=["UpscaleCap-factor-8", "floor-of-4-then-factor", "scale-down-unlimited"])
def test_legacy_limits_with_factor_8(current: int, desired: int, expected: int) -> None:
    assert legacy_limits(current, desired, 1, 100, scale_up_factor=8.0) == expected


def test_legacy_limits_default_factor_and_minimum() -> None:
    assert legacy_limits(1, 50, 1, 100) == 4
    assert legacy_limits(10, 50, 1, 100) == 20
    assert legacy_limits(10, 0, 3, 100) == 3


def test_events_older_than_the_period_do_not_count() -> None:
    old = (ScaleEvent(50, NOW - 61.0),)
    assert behavior_limits(10, 500, 1, 1000, old, (), rules((PODS, 5, 60)), DEFAULT_SCALE_DOWN, NOW) == 15


def test_event_exactly_at_period_start_does_not_count() -> None:
    edge = (ScaleEvent(50, NOW - 60.0),)
    assert behavior_limits(10, 500, 1, 1000, edge, (), rules((PODS, 5, 60)), DEFAULT_SCALE_DOWN, NOW) == 15


def test_record_scale_event_reuses_outdated_slot() -> None:
    stored = (ScaleEvent(3, NOW - 500.0), ScaleEvent(2, NOW - 10.0))
    updated = record_scale_event(stored, 7, 60, NOW)
    assert updated == (ScaleEvent(7, NOW), ScaleEvent(2, NOW - 10.0))
    assert record_scale_event(updated, 1, 60, NOW + 1)[-1] == ScaleEvent(1, NOW + 1)
