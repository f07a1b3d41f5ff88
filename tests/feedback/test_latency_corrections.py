import math

import numpy as np
import pytest

from headroom.feedback.latency_corrections import MAX_FACTOR, MAX_SERVERS, RING, LatencyCorrections


def factor(corrections, server="a", target="ttft", now=0.0):
    return math.exp(corrections.log_factors_of([server], now)[("ttft", "tpot", "e2e").index(target), 0])


def observe(corrections, ratios, server="a", pool="p", target="ttft", version=1, now=0.0):
    for ratio in ratios:
        corrections.observe(server, pool, target, predicted_ms=100.0, actual_ms=100.0 * ratio, version=version,
                            now=now)


@pytest.mark.parametrize("completions, low, high", [
    pytest.param(1, 1.0, 1.0, id="one-is-an-extreme-and-left-out"),
    pytest.param(2, 1.15, 1.25, id="two"),
    pytest.param(3, 1.4, 1.5, id="three"),
    pytest.param(5, 1.85, 1.95, id="five"),
    pytest.param(30, 1.95, 2.0, id="many"),
])
def test_a_server_made_2x_slower_is_priced_slower_after_a_few_of_its_completions(completions, low, high):
    corrections = LatencyCorrections()
    observe(corrections, [1.0] * RING)  # as predicted, for a while
    observe(corrections, [2.0] * completions)
    assert low <= factor(corrections) <= high


def test_it_corrects_the_mean_the_model_predicts_not_the_common_case():
    corrections = LatencyCorrections()
    observe(corrections, [0.5, 0.5, 0.5, 2.5] * 6)  # bimodal around a mean the model has right
    assert factor(corrections) == pytest.approx(1.0, abs=0.15)


def test_a_fresh_server_learns_from_its_first_completions():
    corrections = LatencyCorrections()
    observe(corrections, [2.0])
    assert 1.3 < factor(corrections) < 1.5  # one completion counts half
    observe(corrections, [2.0] * 2)
    assert 1.65 < factor(corrections) < 1.8


def test_targets_and_servers_are_apart():
    corrections = LatencyCorrections()
    observe(corrections, [3.0] * 5, target="tpot")
    assert factor(corrections, target="ttft") == 1.0 and factor(corrections, target="e2e") == 1.0
    assert factor(corrections, server="b", target="tpot") == 1.0
    assert factor(corrections, target="tpot") > 2.4


def test_a_new_model_version_fades_it_and_older_ratios_are_left_out():
    corrections = LatencyCorrections(version_fade=0.5)
    observe(corrections, [4.0] * 10, version=1)
    before = factor(corrections)
    corrections.model_version("p", "ttft", 2)
    assert factor(corrections) == pytest.approx(math.sqrt(before))
    observe(corrections, [16.0] * 10, version=1)  # measured against the old model: left out
    assert factor(corrections) == pytest.approx(math.sqrt(before))
    corrections.model_version("other-pool", "ttft", 9)  # another pool's model changes nothing here
    corrections.model_version("p", "ttft", 1)  # nor does an older version
    assert factor(corrections) == pytest.approx(math.sqrt(before))
    observe(corrections, [1.0] * RING, version=2)  # the new model is right: the correction is gone
    assert factor(corrections) == pytest.approx(1.0)


def test_it_fades_with_the_time_since_the_last_completion():
    corrections = LatencyCorrections(half_life_s=30.0)
    observe(corrections, [4.0] * 10, now=100.0)
    assert factor(corrections, now=100.0) == pytest.approx(4.0, rel=0.15)
    assert factor(corrections, now=130.0) == pytest.approx(math.sqrt(factor(corrections, now=100.0)))
    assert factor(corrections, now=400.0) < 1.01
    assert factor(corrections, now=50.0) == factor(corrections, now=100.0)  # never grows into the past


@pytest.mark.parametrize("garbage", [
    pytest.param([1e12], id="huge"), pytest.param([1e-12], id="tiny"), pytest.param([math.nan], id="nan"),
    pytest.param([math.inf], id="inf"), pytest.param([0.0], id="zero"), pytest.param([-5.0], id="negative"),
])
def test_bounded_under_garbage(garbage):
    corrections = LatencyCorrections()
    observe(corrections, [1.0] * RING)
    observe(corrections, garbage)  # one wild completion among sound ones moves nothing
    assert factor(corrections) == pytest.approx(1.0)
    for _ in range(50):  # a flood of them is still bounded
        observe(corrections, garbage)
    assert 1 / MAX_FACTOR <= factor(corrections) <= MAX_FACTOR
    assert np.isfinite(corrections.log_factors_of(["a"], now=0.0)).all()


def test_a_bad_prediction_is_left_out():
    corrections = LatencyCorrections()
    for predicted in (0.0, -1.0, math.nan, math.inf):
        corrections.observe("a", "p", "ttft", predicted_ms=predicted, actual_ms=100.0, version=1, now=0.0)
    assert factor(corrections) == 1.0


def test_servers_are_bounded_and_forgotten_servers_free_their_slot():
    corrections = LatencyCorrections()
    for i in range(MAX_SERVERS + 10):
        observe(corrections, [2.0], server=f"s{i}")
    assert factor(corrections, server=f"s{MAX_SERVERS + 5}") == 1.0  # past the bound: left out
    corrections.forget("s0")
    assert factor(corrections, server="s0") == 1.0
    observe(corrections, [2.0] * 3, server="late")
    assert factor(corrections, server="late") > 1.5
    assert corrections.log_factors_of(["never-seen"], now=0.0).shape == (3, 1)


@pytest.mark.parametrize("half_life_s, version_fade", [(0.0, 0.5), (-1.0, 0.5), (10.0, 1.5), (10.0, -0.1)])
def test_settings_are_checked(half_life_s, version_fade):
    with pytest.raises(ValueError, match="half_life_s"):
        LatencyCorrections(half_life_s, version_fade)
