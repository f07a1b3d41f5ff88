"""The arrivals the regime benchmarks play: the scenarios' own, or the demo's mix of them."""

from headroom.benchmarks.regime_quality import arrivals, dressed
from headroom.sim.scenarios import scenario


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
