"""The regime benchmarks' report: windows over seeds, the reference, the time to recover and the goals."""

import pytest

from headroom.benchmarks.regime_report import markdown, summarize
from headroom.sim.scenarios import scenario

S = scenario("slowdown").with_(duration_s=20.0, change_at_s=10.0)


def rows(*windows):
    """One request per second; in window i, ``windows[i]`` of each five met the SLO."""
    return [(i * 5.0 + j, 100.0 * (i + 1), j < met) for i, met in enumerate(windows) for j in range(5)]


def test_summary_over_seeds_with_the_best_baseline_as_the_reference():
    runs = {"headroom": [rows(5, 5, 2, 5), rows(5, 5, 5, 5)],
            "least-queue": [rows(5, 5, 4, 4), rows(5, 5, 4, 4)],
            "random": [rows(5, 5, 1, 1), rows(5, 5, 1, 1)],
            "oracle": [rows(5, 5, 5, 5), rows(5, 5, 5, 5)]}
    summary = summarize(S, runs)
    assert summary["reference"] == "least-queue"  # the oracle is never the reference
    assert summary["recovery_s"] == [5.0, 0.0]  # seed 0: below in [10, 15), at or above from 15 on
    ours = summary["policies"]["headroom"]
    assert ours["whole"]["attainment"] == pytest.approx((17 / 20 + 1) / 2)
    assert ours["whole"]["attainment_range"] == [17 / 20, 1.0]
    assert [w["attainment"] for w in ours["windows"]] == pytest.approx([1.0, 1.0, 0.7, 1.0])
    assert ours["after"]["attainment"] == pytest.approx((7 / 10 + 1) / 2)
    assert summary["verdict"] == {"attainment_at_least": [False, True], "p99_at_most": [True, True],
                                  "recovered_within_10s": [True, True]}
    text = markdown(summary)
    assert "| 10 ← | 70.0% / 300 | 80.0% / 300 |" in text and "per seed: 5 s, 0 s" in text


def test_a_reference_given_by_name_and_a_policy_that_never_recovers():
    summary = summarize(S, {"headroom": [rows(5, 5, 5, 1)], "baseline": [rows(5, 5, 5, 5)]}, reference="baseline")
    assert summary["recovery_s"] == [None] and summary["verdict"]["recovered_within_10s"] == [False]
    assert "per seed: never" in markdown(summary)


def test_a_variant_of_headroom_is_never_the_reference():
    runs = {"headroom": [rows(5, 5, 4, 4)], "least-queue": [rows(5, 5, 3, 3)], "headroom 0.5": [rows(5, 5, 5, 5)]}
    assert summarize(S, runs, baselines=["least-queue"])["reference"] == "least-queue"
    assert summarize(S, runs)["reference"] == "headroom 0.5"  # without the baselines named, every other policy
