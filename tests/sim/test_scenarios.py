"""Each declared scenario does what it says when the offline simulator plays it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from headroom.sim.policies import policy
from headroom.sim.scenario_play import actions, play, served
from headroom.sim.scenarios import SCENARIOS, Burst, KvShrink, Scenario, Slowdown, scenario, warp
from headroom.sim.windows import recovery_s, whole, windows

SHORT = {"duration_s": 40.0, "change_at_s": 20.0}


def short(name: str, **changes) -> Scenario:
    return scenario(name).with_(**{**SHORT, **changes})


def steady(s: Scenario) -> Scenario:
    return s.with_(change=None)


def arrivals_in(requests, start: float, end: float) -> float:
    """Requests/s arriving in ``[start, end)``."""
    return sum(start <= r.arrival_s < end for r in requests) / (end - start)


def test_every_scenario_is_declared_at_a_load_users_run_at_and_states_its_change() -> None:
    assert sorted(SCENARIOS) == ["burst", "kv-shrink", "long-prompts", "replace", "slowdown"]
    for s in SCENARIOS.values():
        assert 0.6 <= s.load <= 0.9 and s.change is not None
        assert s.name in s.describe() and f"{s.load:.0%} of capacity" in s.describe()
    with pytest.raises(ValueError, match="unknown scenario 'nope'; known: slowdown"):
        scenario("nope")
    with pytest.raises(ValueError, match=r"changes \['h100-9'\], not in its pool"):
        Scenario("bad", Slowdown(("h100-9",)))


def test_the_load_is_the_stated_share_of_the_pools_capacity() -> None:
    s = short("slowdown")
    requests = s.requests()
    assert all(r.stream and r.slo_ttft_ms == s.slo[0] == 4000.0 for r in requests)
    assert arrivals_in(requests, 0.0, s.duration_s) == pytest.approx(s.load * s.capacity(), rel=0.2)


def test_the_burst_has_the_stated_rate_for_its_seconds() -> None:
    s = short("burst")
    assert isinstance(s.change, Burst) and s.change.seconds == 20.0  # the whole second half here
    requests, capacity = s.requests(), s.capacity()
    assert arrivals_in(requests, 0.0, 20.0) == pytest.approx(s.load * capacity, rel=0.2)
    assert arrivals_in(requests, 20.0, 40.0) == pytest.approx(1.5 * capacity, rel=0.2)
    longer = s.with_(duration_s=120.0)  # the trace's own rate wanders by a fifth over tens of seconds
    assert arrivals_in(longer.requests(), 40.0, 120.0) == pytest.approx(s.load * capacity, rel=0.2)


def test_warp_lays_unit_arrivals_onto_the_rates_of_each_segment() -> None:
    assert warp([0.0, 5.0, 10.0, 30.0, 31.0], [(0.0, 1.0), (10.0, 10.0), (12.0, 1.0)]) == pytest.approx(
        [0.0, 5.0, 10.0, 12.0, 13.0])


def test_long_prompts_lengthen_every_prompt_from_the_change_on_at_the_same_share_of_capacity() -> None:
    s = short("long-prompts", duration_s=80.0)
    shifted, before = s.requests(), steady(s).requests()
    for new, old in zip(shifted, before):  # the same rows of the trace, in order
        if new.arrival_s < 20.0:
            assert (new.arrival_s, new.prompt_tokens) == (old.arrival_s, old.prompt_tokens)
        else:
            assert new.prompt_tokens == old.prompt_tokens * 3
    assert s.capacity(after=True) < 0.5 * s.capacity()
    assert arrivals_in(shifted, 20.0, 80.0) == pytest.approx(s.load * s.capacity(after=True), rel=0.2)
    assert "(then at 70% of the capacity left)" in s.describe()


def test_the_slowed_servers_steps_are_twice_as_slow_and_the_others_unchanged() -> None:
    s = short("slowdown")
    assert s.capacity(after=True) == pytest.approx(s.capacity() * (1 - 0.5 * 2 * 17.58 / 60.56), rel=0.01)
    requests = s.requests()
    slowed, base = (play(x, requests, policy("round-robin")) for x in (s, steady(s)))

    def late_tpot(result, server):
        values = [o.tpot_ms for o in result.outcomes if o.server_id == server and o.submitted_s > 21.0]
        return sum(values) / len(values)

    for server in ("h100-0", "h100-1"):
        assert late_tpot(slowed, server) > 1.9 * late_tpot(base, server)
    for server in ("h100-2", "a100-0"):  # round-robin sends them the same requests either way
        assert late_tpot(slowed, server) == pytest.approx(late_tpot(base, server))


def test_the_kv_cache_of_one_server_shrinks_to_a_quarter() -> None:
    s = short("kv-shrink")
    assert isinstance(s.change, KvShrink)
    seen = {}
    probe = [(19.0, lambda c: seen.update(before=c.kv_capacity("h100-0"))),
             (21.0, lambda c: seen.update(after=c.kv_capacity("h100-0"), other=c.kv_capacity("h100-1")))]
    from headroom.sim.pool import run
    from headroom.sim.scenario_play import pool
    result = run(s.requests(), pool(s), policy("round-robin"), actions=[*actions(s), *probe])
    assert seen == {"before": 29_205, "after": 29_205 // 4, "other": 29_205}
    usage = {t: [m.metrics.kv_cache_usage for m in result.metrics if m.server_id == "h100-0" and t <= m.time_s < t + 15]
             for t in (5.0, 25.0)}
    assert max(usage[25.0]) > 3 * max(usage[5.0])  # the same kind of load fills a quarter of the blocks


def test_replace_adds_a_server_that_serves_at_once_and_drains_the_removed_one() -> None:
    s = short("replace")
    result = play(s, s.requests(), policy("round-robin"))
    assert result.servers == {"h100-0": "removed", "h100-1": "ready", "h100-2": "ready", "a100-0": "ready",
                              "h100-3": "ready"}
    by_server = {sid: [o.submitted_s for o in result.outcomes if o.server_id == sid] for sid in result.servers}
    assert max(by_server["h100-0"]) < 20.0 and min(by_server["h100-3"]) >= 20.0
    assert min(by_server["h100-3"]) < 21.0 and not result.dropped


def test_windows_and_the_time_to_recover() -> None:
    rows = [(0.5, 100.0, True), (1.0, None, False), (6.0, 300.0, False), (11.0, 50.0, True)]
    got = windows(rows, 15.0)
    assert [(w.start_s, w.requests, w.attainment) for w in got] == [(0.0, 2, 0.5), (5.0, 1, 0.0), (10.0, 1, 1.0)]
    assert got[1].ttft_p99_ms == 300.0 and whole(rows) == (0.5, pytest.approx(296.0))
    reference = windows([(0.5, 1.0, True), (6.0, 1.0, True), (11.0, 1.0, True)], 15.0)
    assert recovery_s(got, reference, 5.0) == 5.0  # below in [5, 10), at or above from 10 on
    assert recovery_s(got, reference, 0.0) == 10.0
    assert recovery_s(reference, got, 5.0) == 0.0
    assert recovery_s(windows([(11.0, 1.0, False)], 15.0), reference, 5.0) is None


def test_served_counts_a_dropped_request_as_a_miss() -> None:
    s = short("kv-shrink", change=KvShrink("h100-0", share=0.001))  # 29 blocks: almost no request fits
    requests = s.requests()
    result = play(s, requests, policy("round-robin"))
    rows = served(result, s.slo)
    dropped = [row for row in rows if row[1] is None]
    assert len(rows) == len(requests) and len(dropped) == len(result.dropped) > 10
    assert all(not met for _, _, met in dropped) and min(d.time_s for d in result.dropped) >= 20.0
    assert whole(rows)[0] == pytest.approx(sum(met for _, _, met in rows) / len(rows))
    assert whole(rows)[0] <= 1 - len(dropped) / len(rows)


def test_served_judges_only_the_requests_sent_with_an_slo() -> None:
    s = short("kv-shrink", change=KvShrink("h100-0", share=0.001))
    requests = [r if i % 3 else replace(r, slo_ttft_ms=None, slo_tpot_ms=None) for i, r in enumerate(s.requests())]
    result = play(s, requests, policy("round-robin"))
    rows = served(result, s.slo)
    with_slo = sorted(r.arrival_s for r in requests if r.slo_ttft_ms is not None)
    assert [arrival for arrival, _, _ in rows] == with_slo and 0 < len(rows) < len(requests)


def test_a_scenario_longer_than_its_stretch_of_the_trace_says_so() -> None:
    with pytest.raises(ValueError, match=r"scenario 'burst': the 4000 requests of the trace past row 100 end before "
                                         r"its 3600 s"):
        scenario("burst").with_(duration_s=3600.0).requests()
