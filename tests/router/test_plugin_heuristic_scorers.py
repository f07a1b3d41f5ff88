import pytest

from headroom.router.framework.plugins import kv_cache_free_scorer, prefix_match_scorer, queue_scorer
from tests.router.routercases import cand, req

CASES = [
    pytest.param(kv_cache_free_scorer, [cand("a", kv_cache_usage=0.25), cand("b", kv_cache_usage=1.0)], (0.75, 0.0),
                 id="kv-free"),
    pytest.param(queue_scorer, [cand("a", num_waiting=0), cand("b", num_waiting=10), cand("c", num_waiting=5)],
                 (1.0, 0.0, 0.5), id="relative-queue"),
    pytest.param(queue_scorer, [cand("a", num_waiting=4), cand("b", num_waiting=4)], (1.0, 1.0), id="equal-queues"),
    pytest.param(prefix_match_scorer, [cand("a", prefix_match=0.5), cand("b")], (0.5, 0.0), id="prefix-match"),
]


@pytest.mark.parametrize("module, candidates, expected", CASES)
def test_heuristic_scorer(module, candidates, expected):
    assert module.build("s").score(req(), candidates) == pytest.approx(expected)
