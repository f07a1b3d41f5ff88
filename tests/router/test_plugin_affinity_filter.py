import pytest

from headroom.router.framework.plugins.prefix_cache_affinity_filter import build
from tests.router.routercases import cand, ctx, req


def names(cands):
    return sorted(c.server.server_id for c in cands)


NO_EXPLORE = {"explorationProbability": 0.0}

CASES = [
    pytest.param({"affinityThreshold": 0.0}, [cand("a", prefix_match=0.9), cand("b", prefix_match=0.1)],
                 ["a", "b"], id="threshold-disabled-keeps-all"),
    pytest.param(NO_EXPLORE, [cand("a", prefix_match=0.0)], ["a"], id="single-endpoint"),
    pytest.param(NO_EXPLORE, [cand("a", prefix_match=0.1), cand("b", prefix_match=0.14)], ["a", "b"],
                 id="no-sticky-endpoints-keeps-all"),
    pytest.param({**NO_EXPLORE, "affinityThreshold": 0.8}, [cand("a", prefix_match=0.5), cand("b", prefix_match=0.79)],
                 ["a", "b"], id="reference-threshold-no-sticky-endpoints"),
    pytest.param({**NO_EXPLORE, "affinityThreshold": 0.8}, [cand("a", prefix_match=0.85), cand("b", prefix_match=0.5)],
                 ["a"], id="reference-threshold-keeps-warm"),
    pytest.param(NO_EXPLORE, [cand("a", prefix_match=0.3), cand("b", prefix_match=0.0), cand("c", prefix_match=0.14)],
                 ["a"], id="partial-match-is-warm-by-default"),
    pytest.param(NO_EXPLORE, [cand("a", 100, prefix_match=0.85), cand("b", 100, prefix_match=0.1),
                              cand("c", 100, prefix_match=0.95)], ["a", "c"], id="warm-servers-kept"),
    pytest.param(NO_EXPLORE, [cand("a", prefix_match=0.995), cand("b", prefix_match=0.9), cand("c", prefix_match=0.0)],
                 ["a"], id="strict-gate-first"),
    pytest.param({**NO_EXPLORE, "strictThreshold": 0.0},
                 [cand("a", prefix_match=0.995), cand("b", prefix_match=0.9), cand("c", prefix_match=0.0)],
                 ["a", "b"], id="strict-gate-disabled"),
    pytest.param(NO_EXPLORE, [cand("a", 700, prefix_match=0.9), cand("b", 100, prefix_match=0.0)], ["a", "b"],
                 id="ttft-penalty-breaks-stickiness"),
    pytest.param(NO_EXPLORE, [cand("a", 550, prefix_match=0.9), cand("b", 100, prefix_match=0.0)], ["a"],
                 id="ttft-penalty-within-limit-keeps-warm"),
    pytest.param({**NO_EXPLORE, "maxTTFTPenaltyMs": 100.0},
                 [cand("a", 300, prefix_match=0.9), cand("b", 100, prefix_match=0.0)], ["a", "b"],
                 id="ttft-penalty-configurable"),
    pytest.param(NO_EXPLORE, [cand("a", None, prefix_match=0.9), cand("b", 100, prefix_match=0.0)], ["a"],
                 id="warm-group-without-predictions-does-not-trip-gate"),
    pytest.param(NO_EXPLORE, [cand("a", 100, prefix_match=0.9), cand("b", None, prefix_match=0.0)], ["a"],
                 id="cold-group-without-predictions-does-not-block-gate"),
    pytest.param({"explorationProbability": 1.0}, [cand("a", prefix_match=0.9), cand("b", prefix_match=0.0)],
                 ["a", "b"], id="exploration-skips-filter"),
]


@pytest.mark.parametrize("params, candidates, expected", CASES)
def test_affinity_filter(params, candidates, expected):
    assert names(build("affinity", params).filter(req(), candidates, ctx())) == expected


def test_exploration_rate_matches_probability():
    plugin = build("affinity", {"explorationProbability": 0.1})
    context = ctx(seed=7)
    candidates = [cand("a", prefix_match=0.9), cand("b", prefix_match=0.0)]
    explored = sum(len(plugin.filter(req(), candidates, context)) == 2 for _ in range(5000))
    assert 400 <= explored <= 600  # 500 expected; bounds are > 4 standard deviations
