import pytest

from headroom.router.framework.plugins.tpot_protection_filter import build
from tests.router.routercases import cand, ctx, req


def names(cands):
    return sorted(c.server.server_id for c in cands)


SLO = req(slo_ttft_ms=600.0, stream=True)

CASES = [
    pytest.param({}, [cand("a", 100), cand("b", 200)], ["a", "b"], id="none-at-risk-keeps-all"),
    pytest.param({}, [cand("a", 100, tpot_at_risk=3), cand("b", 200), cand("c", 50, tpot_at_risk=1)], ["b"],
                 id="keeps-the-server-whose-streams-are-fine"),
    pytest.param({}, [cand("a", 100, tpot_at_risk=3), cand("b", 200, tpot_at_risk=1), cand("c", 50, tpot_at_risk=1)],
                 ["b", "c"], id="all-at-risk-keeps-the-fewest"),
    pytest.param({}, [cand("a", 100, tpot_at_risk=2), cand("b", 200, tpot_at_risk=2)], ["a", "b"],
                 id="equally-at-risk-keeps-all"),
    pytest.param({}, [cand("a", 100, tpot_at_risk=0.2), cand("b", 200)], ["b"], id="spares-a-fraction-of-a-miss"),
    pytest.param({"tolerance": 1}, [cand("a", 100, tpot_at_risk=1), cand("b", 200), cand("c", tpot_at_risk=2)],
                 ["a", "b"], id="tolerance"),
    pytest.param({}, [cand("a", None, tpot_at_risk=1), cand("b", None)], ["b"], id="works-without-predictions"),
    pytest.param({}, [cand("a", 100, tpot_at_risk=2), cand("b", 350, tpot_at_risk=1), cand("c", 900)], ["c"],
                 id="no-ttft-slo-no-penalty-gate"),
]


@pytest.mark.parametrize("params, candidates, kept", CASES)
def test_tpot_protection_filter(params, candidates, kept):
    assert names(build("protect", params).filter(req(), candidates, ctx())) == kept


GATED = [  # the request's TTFT SLO is 600 ms
    pytest.param({"ttftMargin": 0.2}, [cand("a", 100, tpot_at_risk=2), cand("b", 350, tpot_at_risk=1), cand("c", 500)],
                 ["b"], id="spares-streams-where-a-fifth-of-the-slo-is-left"),
    pytest.param({"ttftMargin": 0.2}, [cand("a", 100, tpot_at_risk=2), cand("b", 350, tpot_at_risk=2), cand("c", 500)],
                 ["a", "b", "c"], id="too-close-to-the-slo-to-spare-keeps-all"),
    pytest.param({}, [cand("a", 100, tpot_at_risk=2), cand("c", 590)], ["c"], id="no-margin-by-default"),
    pytest.param({}, [cand("a", 700, tpot_at_risk=2), cand("b", 1250, tpot_at_risk=1), cand("c", 1400)], ["b"],
                 id="late-anyway-moves-within-the-penalty"),
    pytest.param({"ttftPenalty": 0.5}, [cand("a", 700, tpot_at_risk=2), cand("b", 1250, tpot_at_risk=1)],
                 ["a", "b"], id="late-anyway-too-slow-keeps-all"),
    pytest.param({}, [cand("a", 100, tpot_at_risk=2), cand("b", None, tpot_at_risk=1)], ["b"],
                 id="unpredicted-are-not-gated"),
]


@pytest.mark.parametrize("params, candidates, kept", GATED)
def test_a_request_with_a_ttft_slo_moves_at_most_a_share_of_it_to_spare_streams(params, candidates, kept):
    assert names(build("protect", params).filter(SLO, candidates, ctx())) == kept


def test_single_candidate_is_kept():
    only = [cand("a", 100, tpot_at_risk=4)]
    assert names(build("protect").filter(req(), only, ctx())) == ["a"]
