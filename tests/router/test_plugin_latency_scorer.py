from dataclasses import replace

import pytest

from headroom.router.framework.plugins.latency_scorer import POSITIVE_FLOOR, build
from tests.router.routercases import cand, req

SLO = {"slo_ttft": 1000.0}


def best(scorer, request, candidates):
    scores = scorer.score(request, candidates)
    return candidates[max(range(len(scores)), key=scores.__getitem__)].server.server_id


CASES = [
    pytest.param({}, req(), [cand("a", 300), cand("b", 100), cand("c", 200)], "b", id="no-slo-lowest-latency"),
    pytest.param({}, req(stream=True), [cand("a", 100, 50), cand("b", 110, 10)], "a", id="streaming-ttft-dominates"),
    pytest.param({"ttftWeight": 0.1, "tpotWeight": 0.9}, req(stream=True), [cand("a", 100, 50), cand("b", 110, 10)],
                 "b", id="streaming-tpot-weight"),
    pytest.param({"headroomSelectionStrategy": "least"}, req(slo_ttft_ms=1000.0),
                 [cand("a", 900, **SLO), cand("b", 100, **SLO)], "a", id="least-packs-smallest-headroom"),
    pytest.param({"headroomSelectionStrategy": "most"}, req(slo_ttft_ms=1000.0),
                 [cand("a", 900, **SLO), cand("b", 100, **SLO)], "b", id="most-spreads-largest-headroom"),
    pytest.param({}, req(slo_ttft_ms=1000.0), [cand("a", 900, **SLO), cand("b", 100, **SLO)], "b",
                 id="default-is-most"),
    pytest.param({}, req(slo_ttft_ms=1000.0), [cand("a", 1200, **SLO), cand("b", 900, **SLO)], "b",
                 id="mixed-positive-wins"),
    pytest.param({}, req(slo_ttft_ms=1000.0),
                 [cand("a", 1200, **SLO), cand("b", 3000, **SLO, num_running=0)], "b",
                 id="all-negative-prefers-idle"),
    pytest.param({}, req(slo_ttft_ms=1000.0), [cand("a", 1900, **SLO), cand("b", 1200, **SLO)], "b",
                 id="all-negative-smallest-deficit"),
]


@pytest.mark.parametrize("params, request_, candidates, expected", CASES)
def test_latency_scorer_best(params, request_, candidates, expected):
    assert best(build("latency", params), request_, candidates) == expected


def test_negative_scores_zero_when_some_positive():
    scores = build("latency", {"headroomSelectionStrategy": "least"}).score(req(slo_ttft_ms=1000.0), [cand("a", 1200, **SLO), cand("b", 900, **SLO),
                                                               cand("c", 500, **SLO)])
    assert scores[0] == 0.0 and scores[1] > scores[2] >= POSITIVE_FLOOR


def test_unpredicted_scores_zero():
    assert build("latency").score(req(), [cand("a", 100), cand("b", None)])[1] == 0.0


def test_rejects_bad_strategy():
    from headroom.router.errors import ConfigError
    with pytest.raises(ConfigError, match="headroomSelectionStrategy.*'least', 'most'.*'middle'"):
        build("latency", {"headroomSelectionStrategy": "middle"})


def with_e2e(candidate, e2e_ms):
    return replace(candidate, prediction=replace(candidate.prediction, e2e_ms=e2e_ms))


def test_a_server_without_an_e2e_model_is_not_priced_by_its_ttft_beside_the_others_e2e():
    # a non-streaming request: a's pool has no E2E model yet; its TTFT must not look 30x faster than b's E2E
    candidates = [cand("a", 200), with_e2e(cand("b", 100), 6000.0), with_e2e(cand("c", 150), 5000.0)]
    assert best(build("latency"), req(stream=False), candidates) == "b"  # every one of them by TTFT
    assert best(build("latency"), req(stream=False), candidates[1:]) == "c"  # by E2E where all have it
