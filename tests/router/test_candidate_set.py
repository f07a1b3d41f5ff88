import numpy as np
import pytest

from headroom.router.framework.candidate_set import CandidateSet, ScoredSet, score_column
from headroom.router.framework.roles import Prediction, Scored
from tests.router.routercases import cand, server

CANDIDATES = [
    cand("pos", 100, 10.0, slo_ttft=500.0, slo_tpot=20.0),
    cand("neg-ttft", 900, 10.0, slo_ttft=500.0, slo_tpot=20.0),
    cand("neg-tpot", 100, 30.0, slo_ttft=500.0, slo_tpot=20.0),
    cand("ttft-only", 100, slo_ttft=50.0),
    cand("no-slo", 100),
    cand("unpredicted", None),
]


def test_slo_verdicts_match_each_candidate():
    known, meets = CandidateSet.of(CANDIDATES).slo_verdicts()
    expected = [c.meets_slo for c in CANDIDATES]
    assert [m if k else None for k, m in zip(known.tolist(), meets.tolist())] == expected
    assert expected == [True, False, False, False, None, None]


def test_take_keeps_the_original_objects():
    cands = CandidateSet.of(CANDIDATES)
    subset = cands.take(np.array([4, 0]))
    assert list(subset) == [CANDIDATES[4], CANDIDATES[0]] and subset[1] is CANDIDATES[0]
    assert subset.take(np.array([1]))[0] is CANDIDATES[0]
    assert subset.is_predicted.tolist() == [True, True] and subset.pool_keys() == ["default", "default"]
    assert CandidateSet.of(cands) is cands


def test_with_predictions_builds_candidates_on_demand():
    cands = CandidateSet.unpredicted([server("a"), server("b")])
    assert [c.prediction for c in cands] == [None, None] and cands.fallback_reasons() == [None, None]
    versions = {"ttft": 4, "tpot": 4}
    out = cands.with_predictions(np.array([True, False]), np.array([120.0, np.nan]), np.array([9.0, np.nan]),
                                 np.array([300.0, np.nan]), np.array([np.nan, np.nan]), np.array([5.0, np.nan]),
                                 (None, "prediction-failed"), (versions, {}))
    first, second = out
    assert first.prediction == Prediction(120.0, 9.0, 300.0, versions) and first.server == server("a")
    assert (first.ttft_headroom_ms, first.tpot_headroom_ms) == (None, 5.0)
    assert second.prediction is None and second.fallback_reason == "prediction-failed"
    assert out.response_ms(False)[0] == 300.0 and out.response_ms(True)[0] == 120.0


def test_scored_set_and_score_column():
    cands = CandidateSet.of(CANDIDATES[:2])
    scored = ScoredSet(cands, np.array([0.25, 0.5]))
    assert list(scored) == [Scored(CANDIDATES[0], 0.25), Scored(CANDIDATES[1], 0.5)]
    assert score_column(scored) is scored.scores
    assert score_column([Scored(CANDIDATES[0], 0.75)]).tolist() == [0.75]
    with pytest.raises(IndexError):
        scored[2]
