"""The recommendation search on a short synthetic trace."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from headroom.autoscale.closed_loop import LoopSettings
from headroom.autoscale.manifest import emit_manifest
from headroom.autoscale.recommend import Candidate, Evaluation, Slo, _bisect, make_spec, recommend
from headroom.autoscale.signals import Signal
from headroom.sim.request import Request


def burst_trace() -> list[Request]:
    """60 s at 4 req/s, then 60 s at 60 req/s: needs scaling within seconds."""
    requests = [Request(f"a{i}", i / 4.0, 1000, 100) for i in range(240)]
    requests += [Request(f"b{i}", 60.0 + i / 60.0, 1000, 100) for i in range(60 * 60)]
    return requests


def test_recommendation_is_the_cheapest_passing_run_and_valid_yaml() -> None:
    slo = Slo(ttft_p99_ms=2000.0)
    result = recommend(burst_trace(), slo, 1, 6, LoopSettings(load_delay_s=20.0))
    assert {e.candidate.signal for e in result.evaluations} == {Signal.QUEUE_SIZE, Signal.SLOTS_USED,
                                                                 Signal.KV_CACHE_USAGE, Signal.TTFT_SLO_RATIO}
    assert result.best is not None and result.best.meets
    assert result.best.ttft_p99_ms <= slo.ttft_p99_ms
    passing = [e for e in result.evaluations if e.meets]
    assert result.best.replica_hours == min(e.replica_hours for e in passing)
    assert result.ranked()[0] is result.best
    assert result.best.candidate.spec.behavior is not None
    document = yaml.safe_load(emit_manifest(result.best.candidate.spec))
    kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)


def _evaluation(target: float, meets: bool) -> Evaluation:
    candidate = Candidate(Signal.SLOTS_USED, target, "kubernetes-default", make_spec(Signal.SLOTS_USED, target,
                                                                                     None, 1, 4))
    return Evaluation(candidate, 1.0, 100.0, 10.0, 1.0 if meets else 0.5, 0, meets, result=None)


@pytest.mark.parametrize("outcomes, expected", [
    ({0.2: True, 0.8: False}, 0.4),
    ({0.2: True, 0.4: True, 0.8: False}, 0.57),
    ({0.2: False, 0.8: False}, None),
    ({0.2: True, 0.8: True}, None),
], ids=["between-pass-and-fail", "from-the-highest-pass", "nothing-passes", "everything-passes"])
def test_bisection_targets_the_gap_below_the_first_failure(outcomes: dict[float, bool], expected) -> None:
    assert _bisect([_evaluation(t, ok) for t, ok in outcomes.items()]) == expected
