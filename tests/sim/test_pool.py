from __future__ import annotations

import math

import pytest

from headroom.contract.targets import TARGETS
from headroom.contract.telemetry import decode, encode
from headroom.feedback.latency_corrections import EARLY_TPOT_TOKENS
from headroom.sim.oracle import oracle_pick, true_ttft_ms
from headroom.sim.policies import policy
from headroom.sim.pool import PoolControl, SimulationError, run, slow_down, uniform_pool
from headroom.sim.profile import H100
from headroom.sim.request import SimRequest
from headroom.sim.synthetic import Lengths, generate, poisson_arrivals
from headroom.sim.traces import load_mooncake
from headroom.sim.view import Hold, Pick, PoolView, Shed


def _load(rate: float, duration: float = 20.0, seed: int = 0, **kw) -> list[SimRequest]:
    return generate(poisson_arrivals(rate, duration, seed), Lengths(800, 0.6, high=4000), Lengths(100, 0.8, high=600),
                    seed=seed, **kw)


def test_telemetry_has_one_valid_record_per_request_with_stream_semantics() -> None:
    requests = _load(20.0, 10.0, stream_fraction=0.5)
    result = run(requests, uniform_pool(2), policy("least-queue"))
    assert len(result.records) == len(requests) and not result.dropped
    for record in result.records:
        assert decode(encode(record)) == record
        assert record.e2e_ms > 0
        assert (record.ttft_ms is not None) == record.stream
        assert record.pool_key == "h100"
    streamed = [r for r in result.records if r.stream]
    assert 0 < len(streamed) < len(result.records)
    assert all(r.ttft_ms <= r.e2e_ms for r in streamed)


def test_features_are_what_the_router_saw_at_dispatch() -> None:
    seen = {}

    def pick(request: SimRequest, view: PoolView) -> Pick:
        seen[request.request_id] = (view.snapshots[0].metrics.num_running, view.inflight_requests[0])
        return Pick(view.snapshots[0].server_id, predicted_ttft_ms=12.5, model_versions={"ttft": 3})

    result = run(_load(30.0, 5.0), uniform_pool(1), pick)
    for record in result.records:
        assert (record.num_running, record.inflight_requests) == seen[record.request_id]
        assert record.predicted_ttft_ms == 12.5 and record.model_versions == {"ttft": 3}
    assert max(r.inflight_requests for r in result.records) > 0


def test_prefill_tokens_in_flight_are_the_streaming_prompts_still_without_a_first_token() -> None:
    result = run(_load(40.0, 5.0, stream_fraction=0.7), uniform_pool(2), policy("least-queue"))
    outcomes = result.outcomes
    dispatched = {o.request.request_id: o.request.arrival_s for o in outcomes}  # routed on arrival
    for record in result.records:
        t = dispatched[record.request_id]
        expected = sum(o.request.prompt_tokens for o in outcomes
                       if o.server_id == record.server_id and o.request.stream and o.request.arrival_s < t
                       and o.first_token_s > t)
        assert record.inflight_prefill_tokens == expected
    assert max(r.inflight_prefill_tokens for r in result.records) > 0
    assert any(0 < r.inflight_prefill_tokens < r.inflight_prompt_tokens for r in result.records)
    assert all(0 < r.last_token_age_ms <= 10_000.0 for r in result.records)
    assert any(r.last_token_age_ms < 100.0 and r.token_interval_ms > 0 for r in result.records)


def test_snapshots_are_as_stale_as_the_scrape_interval() -> None:
    times = []

    def pick(request: SimRequest, view: PoolView) -> str:
        times.append((view.now, view.snapshots[0].time_s))
        return view.snapshots[0].server_id

    run(_load(50.0, 3.0), uniform_pool(1), pick, scrape_interval_s=0.2)
    assert all(0 <= now - scraped < 0.2 + 1e-9 for now, scraped in times)
    assert max(now - scraped for now, scraped in times) > 0.1


def test_added_server_takes_requests_only_after_its_load_delay() -> None:
    def add_at_5s(control: PoolControl) -> None:
        control.add_server(H100.with_(load_delay_s=3.0), "late")

    requests = _load(20.0, 15.0)
    result = run(requests, uniform_pool(1), policy("round-robin"), actions=[(5.0, add_at_5s)])
    late = [o for o in result.outcomes if o.server_id == "late"]
    assert late and min(o.submitted_s for o in late) >= 8.0
    assert result.servers == {"server-0": "ready", "late": "ready"}
    assert any(not s.ready for s in result.metrics if s.server_id == "late")


def test_removed_server_drains_and_controller_is_called_periodically() -> None:
    calls = []

    def controller(control: PoolControl) -> None:
        calls.append(control.now)
        if len(calls) == 1:
            control.remove_server("server-1")

    result = run(_load(20.0, 12.0), uniform_pool(2), policy("round-robin"), controller=controller,
                 control_interval_s=4.0)
    assert calls[:3] == [4.0, 8.0, 12.0]
    assert all(o.submitted_s <= 4.0 for o in result.outcomes if o.server_id == "server-1")
    assert result.servers["server-1"] == "removed"
    assert len(result.outcomes) + len(result.dropped) == len(_load(20.0, 12.0))


def test_slowdown_action_raises_latency_on_that_server() -> None:
    requests = _load(10.0, 30.0)
    base = run(requests, uniform_pool(2), policy("round-robin"))
    slowed = run(requests, uniform_pool(2), policy("round-robin"), actions=[(10.0, slow_down("server-1", 3.0))])

    def late_e2e(result, server):
        values = [o.e2e_ms for o in result.outcomes if o.server_id == server and o.request.arrival_s > 12.0]
        return sum(values) / len(values)

    assert late_e2e(slowed, "server-1") > 2.0 * late_e2e(base, "server-1")
    assert late_e2e(slowed, "server-0") == pytest.approx(late_e2e(base, "server-0"))


def test_bad_pick_is_an_error() -> None:
    with pytest.raises(SimulationError, match="nowhere"):
        run(_load(5.0, 2.0), uniform_pool(1), lambda request, view: "nowhere")


def test_rising_load_brings_queueing_and_a_longer_ttft_tail() -> None:
    p99, waiting = [], []
    for rate in (5.0, 20.0, 40.0):
        result = run(_load(rate, 30.0, seed=1), uniform_pool(1), policy("round-robin"))
        ttfts = sorted(o.ttft_ms for o in result.outcomes)
        p99.append(ttfts[int(0.99 * len(ttfts))])
        waiting.append(sum(s.metrics.num_waiting for s in result.metrics) / len(result.metrics))
    assert p99[0] < p99[1] < p99[2]
    assert waiting[2] > 10 * waiting[0] and waiting[2] > 0.5


def test_prefix_affine_routing_beats_random_on_mooncake_hit_rate() -> None:
    requests = load_mooncake(limit=1500)  # reuse builds up over the trace: 17% best case by 1,000 requests

    def hit_rate(name: str) -> float:
        result = run(requests, uniform_pool(4), policy(name))
        cached = sum(o.cached_prompt_tokens for o in result.outcomes)
        return cached / sum(o.request.prompt_tokens for o in result.outcomes)

    affine, scattered = hit_rate("composite"), hit_rate("random")
    assert affine > 3 * scattered and affine > scattered + 0.02


def test_oracle_ttft_is_the_ttft_the_request_then_gets() -> None:
    requests = _load(15.0, 6.0, seed=2)
    predicted = {}

    def pick(request: SimRequest, view: PoolView) -> str:
        engine = view.engines()[0]
        predicted[request.request_id] = true_ttft_ms(engine, request, view.now)
        return view.snapshots[0].server_id

    result = run(requests, uniform_pool(1), pick)
    last = requests[-1].request_id  # nothing arrives after it, so the oracle is exact
    outcome = next(o for o in result.outcomes if o.request.request_id == last)
    assert predicted[last] == pytest.approx(outcome.ttft_ms)
    assert all(predicted[o.request.request_id] <= o.ttft_ms + 1e-6 for o in result.outcomes)


def test_oracle_router_is_no_worse_than_random() -> None:
    requests = _load(25.0, 8.0, seed=3)
    oracle = run(requests, uniform_pool(2), oracle_pick)
    randomly = run(requests, uniform_pool(2), policy("random"))
    mean = lambda result: sum(o.ttft_ms for o in result.outcomes) / len(result.outcomes)  # noqa: E731
    assert mean(oracle) < mean(randomly)


def test_runs_without_telemetry_keep_outcomes_only_and_on_record_streams_records() -> None:
    requests = _load(10.0, 3.0)
    quiet = run(requests, uniform_pool(1), policy("round-robin"), telemetry=False)
    assert len(quiet.outcomes) == len(requests) and quiet.records == []
    streamed = []
    loud = run(requests, uniform_pool(1), policy("round-robin"), on_record=streamed.append)
    assert streamed == loud.records and len(streamed) == len(requests)


def test_a_shed_request_is_dropped_with_its_reason_and_never_reaches_a_server() -> None:
    requests = _load(20.0, 2.0)

    def pick(request: SimRequest, view: PoolView):
        return Shed("over budget") if int(request.request_id.split("-")[1]) % 2 else view.snapshots[0].server_id

    result = run(requests, uniform_pool(2), pick)
    shed = {d.request.request_id for d in result.dropped}
    assert shed == {r.request_id for r in requests[1::2]} and {d.reason for d in result.dropped} == {"over budget"}
    served = {o.request.request_id for o in result.outcomes}
    assert served.isdisjoint(shed) and len(served) + len(shed) == len(requests)


def test_held_requests_are_asked_again_oldest_first_as_servers_free_up() -> None:
    requests = [SimRequest(f"r{i}", 0.001 * i, 600, 20) for i in range(5)]
    asked: list[tuple[str, float]] = []

    def one_at_a_time(request: SimRequest, view: PoolView):
        asked.append((request.request_id, view.now - request.arrival_s))
        return Hold("busy") if view.inflight_requests[0] else view.snapshots[0].server_id

    result = run(requests, uniform_pool(1), one_at_a_time)
    served = sorted(result.outcomes, key=lambda o: o.submitted_s)
    assert [o.request.request_id for o in served] == [r.request_id for r in requests] and not result.dropped
    for before, after in zip(served, served[1:]):
        assert after.submitted_s == before.completion_s  # asked again as the one before it finished
        assert after.ttft_ms > (after.submitted_s - after.request.arrival_s) * 1000.0  # its wait counts
    for record in result.records:  # the server's latency, as the router measures it: from the dispatch
        assert record.e2e_ms == pytest.approx((record.completion_ts - record.dispatch_ts) * 1000.0, abs=1e-3)
    waits = [waited for rid, waited in asked if rid == "r4"]
    assert waits[0] == 0.0 and waits == sorted(waits) and len(waits) > 4


def test_a_pick_that_never_lets_go_is_an_error() -> None:
    with pytest.raises(SimulationError, match="held requests for over 3600 s"):
        run([SimRequest("r0", 0.0, 100, 5)], uniform_pool(1), lambda request, view: Hold("forever"))


def test_the_view_holds_the_tpot_slos_of_the_streams_in_flight() -> None:
    requests = [SimRequest(f"r{i}", 0.01 * i, 400, 40, stream=i != 2, slo_tpot_ms=30.0 if i == 1 else None)
                for i in range(5)]
    seen = []

    def pick(request: SimRequest, view: PoolView):
        seen.append(view.running_tpot_slos[0])
        slo = 45.0 if request.request_id == "r3" else None  # the router's own SLO for r3, none for the others
        return Pick(view.snapshots[0].server_id, tpot_slo_ms=slo)

    result = run(requests + [SimRequest("late", 30.0, 100, 2)], uniform_pool(1), pick)
    # r1 keeps its own SLO; r2 does not stream (no TPOT); r3 is held to the router's; all finished before "late"
    assert seen == [(), (), (30.0,), (30.0,), (30.0, 45.0), ()]
    assert len(result.outcomes) == 6


def test_the_view_counts_the_router_streams_at_risk_of_missing_their_tpot_slo() -> None:
    requests = [SimRequest("tight", 0.0, 400, 300), SimRequest("loose", 0.0, 400, 300), SimRequest("probe", 0.3, 100, 2)]
    seen = {}

    def pick(request: SimRequest, view: PoolView):
        seen[request.request_id] = view.tpot_at_risk(0)
        slo = {"tight": 6.7, "loose": 500.0}.get(request.request_id)  # the router holds these two to a TPOT SLO
        return Pick(view.snapshots[0].server_id, tpot_slo_ms=slo)

    run(requests, uniform_pool(1), pick)
    # at 0.3 s "tight" has streamed 43 tokens in 285 ms: 3.5 ms behind its 6.7 ms a token (savable); "loose" is
    # far ahead of its 500 ms
    assert seen == {"tight": 0, "loose": 0, "probe": 1}
    run(requests, uniform_pool(1), pick, lengths=[40] * 20 + [45] * 20 + [100] * 20)
    assert seen["probe"] == 0.5  # of the streams the router saw run past 43 tokens, half ended within 4 more
    run(requests, uniform_pool(1), pick, lengths=[1000] * 60)
    assert seen["probe"] == 0.0  # streams run long here: it has time to catch up


def test_a_stream_that_ends_with_its_first_token_is_accounted_once() -> None:
    requests = generate(poisson_arrivals(80.0, 5.0, 0), Lengths(800, 0.6, high=4000), Lengths(2, 0.5, high=3),
                        seed=0, stream_fraction=1.0)
    assert any(r.output_tokens == 1 for r in requests)
    result = run(requests, uniform_pool(2), policy("least-queue"))
    assert len(result.outcomes) == len(requests) and not result.dropped


@pytest.mark.parametrize("target", ["ttft", "tpot"])
def test_the_router_view_learns_a_streams_ttft_and_tpot_while_it_runs_not_at_its_end(target: str) -> None:
    """Its TTFT at its first token, its TPOT at its token ``1 + EARLY_TPOT_TOKENS``."""
    requests = generate(poisson_arrivals(10.0, 5.0, 0), Lengths(800, 0.6, high=4000), Lengths(300, 0.2, high=400),
                        seed=0, stream_fraction=1.0)
    corrections = {}

    def pick(request: SimRequest, view: PoolView) -> Pick:  # a model that prices every TTFT or TPOT at 1 ms
        corrections[request.request_id] = view.latency_correction(0)[TARGETS.index(target)]
        return Pick(view.snapshots[0].server_id, **{f"predicted_{target}_ms": 1.0}, model_versions={target: 1})

    outcomes = run(requests, uniform_pool(1), pick, record_tokens=True).outcomes
    taught = min(o.token_times[0 if target == "ttft" else EARLY_TPOT_TOKENS] for o in outcomes)
    first_end = min(o.completion_s for o in outcomes)
    before = [o for o in outcomes if o.request.arrival_s < taught]
    between = [o for o in outcomes if taught < o.request.arrival_s < first_end]
    assert before and between
    assert all(corrections[o.request.request_id] == 0.0 for o in before)
    assert all(corrections[o.request.request_id] > 0.5 for o in between)  # slower than 1 ms, before any stream ended


def test_the_router_view_prices_a_server_whose_latest_streams_are_late_for_their_first_tokens() -> None:
    """Before any first token comes, as the router's :class:`FirstTokenWatch`."""
    requests = [SimRequest(f"r{i}", i * 0.01, 4000, 5) for i in range(8)]  # each prefill takes longer than 10 ms
    seen = {}

    def pick(request: SimRequest, view: PoolView) -> Pick:  # a model that prices every TTFT at 2 ms
        seen[request.request_id] = view.latency_correction(0)[TARGETS.index("ttft")]
        return Pick(view.snapshots[0].server_id, predicted_ttft_ms=2.0, model_versions={"ttft": 1})

    outcomes = run(requests, uniform_pool(1), pick, record_tokens=True).outcomes
    assert min(o.token_times[0] for o in outcomes) > 0.03
    assert seen["r0"] == seen["r1"] == 0.0  # no stream, then one alone
    assert seen["r2"] == pytest.approx(math.log(5.0))  # r1 waited 10 ms, r0 20 ms: both at least 5x late
    assert seen["r3"] == pytest.approx(math.log(5.0))  # r2 waited 10 ms
