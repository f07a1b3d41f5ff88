"""The arrivals the regime benchmarks play: the scenarios' own or the demo's mix of them, on the scenarios' trace
or another."""

import argparse
import math
import sys

import pytest

from headroom.benchmarks import regime_quality
from headroom.benchmarks.regime_quality import arrivals, chosen_scenarios, dressed
from headroom.sim.scenarios import SCENARIOS, scenario


def test_the_slo_mix_is_the_scenario_itself():
    s = scenario("burst")
    assert arrivals(s, "slo", seed=1, skip=0) == s.requests(seed=1)


def test_the_demo_mix_dresses_the_same_arrivals_as_the_live_benchmark_sends_them():
    s = scenario("slowdown")
    offline, live = arrivals(s, "demo", seed=2, skip=0), dressed(s, "demo", seed=2, skip=0)
    assert [r.arrival_s for r in offline] == [r.arrival_s for r in s.requests(seed=2)]
    assert [r.stream for r in offline] == [r.stream for r, _ in live]
    assert any(not r.stream for r in offline) and any(r.stream and r.slo_ttft_ms is None for r in offline)
    assert {(r.slo_ttft_ms, r.slo_tpot_ms) for r in offline if r.slo_ttft_ms is not None} == {s.slo}


def options(**given: object) -> argparse.Namespace:
    return argparse.Namespace(**{"scenario": "all", "trace": None, "slo_ttft_ms": None, "slo_tpot_ms": None, **given})


def test_the_scenarios_play_on_another_trace_with_its_own_slo():
    (s,) = chosen_scenarios(options(scenario="burst", trace="code:burst_factor=8", slo_ttft_ms=1000.0))
    assert s.change == scenario("burst").change and s.trace == "code:burst_factor=8"
    assert s.slo == (1000.0 / s.time_scale, scenario("burst").slo[1])
    code = s.requests(seed=0)
    assert code != scenario("burst").requests(seed=0) and all(r.slo_ttft_ms == s.slo[0] for r in code)
    assert [x.trace for x in chosen_scenarios(options())] == ["azure"] * len(SCENARIOS)


@pytest.mark.parametrize("field", ["slo_ttft_ms", "slo_tpot_ms"])
@pytest.mark.parametrize("value", [0.0, -5.0, math.nan, math.inf])
def test_an_slo_that_is_not_a_positive_number_is_refused_by_name(field, value):
    with pytest.raises(ValueError, match=f"--{field.replace('_', '-')} must be a positive number of ms"):
        chosen_scenarios(options(**{field: value}))


def test_a_trace_too_short_for_the_stretches_skipped_is_one_line(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["regime_quality", "--scenario", "slowdown", "--trace", "azure", "--seeds", "1",
                                      "--baselines", "", "--no-oracle"])
    monkeypatch.setattr(regime_quality, "TRAIN_SKIP", 10 ** 6)  # past the end of the trace's file
    with pytest.raises(SystemExit) as exited:
        regime_quality.main()
    assert exited.value.code == 2
    assert "scenario 'slowdown': the 0 requests of the trace past row 1000100 end before" in capsys.readouterr().err
