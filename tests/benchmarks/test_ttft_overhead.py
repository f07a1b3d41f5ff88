"""The low-load overhead benchmark's arithmetic: paired medians, decision times and heuristic shares from scrapes."""

import math

import numpy as np
import pytest

from headroom.benchmarks.ttft_overhead import decision_ms, heuristic_share, paired_median


def test_the_paired_median_and_its_interval_bracket_a_known_shift():
    rng = np.random.default_rng(0)
    differences = 2.0 + rng.normal(0.0, 5.0, 2000)  # headroom 2 ms slower, noise the arms do not share
    found = paired_median(differences, seed=1)
    assert found["ci_low_ms"] < 2.0 < found["ci_high_ms"]
    assert found["ci_high_ms"] - found["ci_low_ms"] < 1.0
    assert found["difference_p50_ms"] == pytest.approx(float(np.median(differences)))


def scrape_of(count, seconds, predicted, heuristic):
    return {"headroom_router_decision_seconds_count": [({}, count)],
            "headroom_router_decision_seconds_sum": [({}, seconds)],
            "headroom_router_decisions_total": [({"profile": "predicted"}, predicted),
                                                ({"profile": "heuristic"}, heuristic)]}


def test_decision_time_and_heuristic_share_count_only_what_happened_between_the_scrapes():
    half, end = scrape_of(100, 0.5, 20, 80), scrape_of(300, 0.7, 210, 90)
    assert decision_ms(half, end) == pytest.approx(1.0)  # 0.2 s over 200 decisions
    assert heuristic_share(half, end) == pytest.approx(10 / 200)
    assert math.isnan(decision_ms(end, end)) and math.isnan(heuristic_share(end, end))
