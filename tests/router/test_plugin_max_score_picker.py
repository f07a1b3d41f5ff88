import random

import pytest

from headroom.router.framework.plugins.max_score_picker import build
from headroom.router.framework.roles import Context, Scored
from tests.router.routercases import cand


def scored(*scores):
    return [Scored(cand(f"s{i}"), s) for i, s in enumerate(scores)]


@pytest.mark.parametrize("scores, params, allowed", [
    pytest.param((0.2, 0.9, 0.5), {}, {1}, id="top-score"),
    pytest.param((0.0, 0.0, 0.0), {}, {0, 1, 2}, id="all-zero-tie"),
    pytest.param((0.7, 0.7, 0.1), {}, {0, 1}, id="tie-at-top"),
    pytest.param((0.69, 0.7, 0.1), {"tieTolerance": 0.05}, {0, 1}, id="within-tolerance"),
    pytest.param((float("nan"), 0.3), {}, {1}, id="nan-loses"),
])
def test_picks_among_the_best(scores, params, allowed):
    picker, options = build("p", params), scored(*scores)
    seen = {options.index(picker.pick(options, Context(rng=random.Random(seed)))) for seed in range(60)}
    assert seen == allowed  # every tied candidate is drawn, no other ever


def test_empty_raises():
    with pytest.raises(ValueError, match="no candidates"):
        build("p").pick([], Context(rng=random.Random(0)))
