import random

import pytest

from headroom.router.framework.plugins.weighted_random_picker import build
from headroom.router.framework.roles import Context, Scored
from tests.router.routercases import cand


def scored(*scores):
    return [Scored(cand(f"s{i}"), s) for i, s in enumerate(scores)]


def test_distribution_proportional_to_score():
    picker, context, n = build("picker"), Context(rng=random.Random(11)), 20000
    options = scored(0.1, 0.3, 0.6)
    counts = [0, 0, 0]
    for _ in range(n):
        counts[options.index(picker.pick(options, context))] += 1
    for count, p in zip(counts, (0.1, 0.3, 0.6)):
        sd = (n * p * (1 - p)) ** 0.5
        assert abs(count - n * p) < 5 * sd, (counts, p)


def test_zero_score_never_picked():
    picker, context = build("picker"), Context(rng=random.Random(2))
    options = scored(0.0, 1.0)
    assert all(picker.pick(options, context) is options[1] for _ in range(1000))


def test_all_zero_picks_uniformly():
    picker, context = build("picker"), Context(rng=random.Random(5))
    options = scored(0.0, 0.0, 0.0)
    seen = {options.index(picker.pick(options, context)) for _ in range(300)}
    assert seen == {0, 1, 2}


def test_same_seed_same_picks():
    options = scored(0.2, 0.5, 0.3)
    runs = [[build("picker").pick(options, Context(rng=r)).candidate.server.server_id for _ in range(50)]
            for r in (random.Random(9), random.Random(9))]
    assert runs[0] == runs[1]


def test_empty_raises():
    with pytest.raises(ValueError, match="no candidates"):
        build("picker").pick([], Context(rng=random.Random(0)))


def test_sharpness_favours_the_best():
    options = scored(0.5, 1.0)
    counts = {}
    for k in (1.0, 4.0):
        picker, context = build("picker", {"sharpness": k}), Context(rng=random.Random(4))
        counts[k] = sum(picker.pick(options, context) is options[1] for _ in range(6000))
    # probabilities of the better option: 2/3 at k=1, 16/17 at k=4 (bounds > 5 standard deviations)
    assert 3800 <= counts[1.0] <= 4200 and counts[4.0] >= 5550
