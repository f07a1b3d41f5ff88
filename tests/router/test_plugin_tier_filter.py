import pytest

from headroom.router.framework.plugins.slo_headroom_tier_filter import build
from tests.router.routercases import cand, ctx, req

SLO = {"slo_ttft": 500.0}
NO_EXPLORE = {"epsilonExploreNeg": 0.0}


def names(cands):
    return sorted(c.server.server_id for c in cands)


CASES = [
    pytest.param(NO_EXPLORE, req(slo_ttft_ms=500.0), [cand("a", 100, **SLO), cand("b", 200, **SLO)], ["a", "b"],
                 id="all-positive-keeps-all"),
    pytest.param(NO_EXPLORE, req(slo_ttft_ms=500.0), [cand("a", 900, **SLO), cand("b", 700, **SLO)], ["a", "b"],
                 id="all-negative-keeps-all"),
    pytest.param(NO_EXPLORE, req(slo_ttft_ms=500.0), [cand("a", 100, **SLO), cand("b", 700, **SLO)], ["a"],
                 id="mixed-keeps-positive"),
    pytest.param({"epsilonExploreNeg": 1.0}, req(slo_ttft_ms=500.0), [cand("a", 100, **SLO), cand("b", 700, **SLO)],
                 ["b"], id="epsilon-keeps-negative"),
    pytest.param(NO_EXPLORE, req(), [cand("a", 100), cand("b", 700)], ["a", "b"], id="no-slo-headers-pass-through"),
    pytest.param(NO_EXPLORE, req(slo_ttft_ms=500.0, stream=True),
                 [cand("a", 100, 30, slo_ttft=500.0, slo_tpot=20.0), cand("b", 200, 10, slo_ttft=500.0, slo_tpot=20.0)],
                 ["b"], id="tpot-headroom-counts"),
    pytest.param(NO_EXPLORE, req(slo_ttft_ms=500.0), [cand("a", 100, **SLO), cand("b", 700, **SLO), cand("c", None)],
                 ["a", "c"], id="unpredicted-stay-with-kept-tier"),
]


@pytest.mark.parametrize("params, request_, candidates, expected", CASES)
def test_tier_filter(params, request_, candidates, expected):
    assert names(build("tiers", params).filter(request_, candidates, ctx())) == expected


def test_negative_exploration_rate():
    plugin = build("tiers", {"epsilonExploreNeg": 0.2})
    context = ctx(seed=3)
    candidates = [cand("a", 100, **SLO), cand("b", 700, **SLO)]
    negative = sum(names(plugin.filter(req(slo_ttft_ms=500.0), candidates, context)) == ["b"] for _ in range(4000))
    assert 650 <= negative <= 950  # 800 expected, > 5 standard deviations either side
