import pytest

from headroom.backtest.router_policy import engine_pick
from headroom.router.errors import ConfigError
from headroom.sim.pool import run, uniform_pool
from headroom.sim.request import SimRequest
from headroom.sim.synthetic import generate, poisson_arrivals
from headroom.sim.view import Hold
from tests.router.routercases import TablePredictor


def test_routes_a_simulated_pool_with_the_predictions_it_used():
    requests = generate(poisson_arrivals(rate=20.0, duration_s=2.0, seed=3), seed=3)[:40]
    result = run(requests, uniform_pool(4), engine_pick(TablePredictor(), slo=(1000.0, 50.0)), seed=0)
    assert len(result.outcomes) == len(requests)
    # the records carry the models' predictions, not the corrected ones the router judged by
    assert all(r.predicted_ttft_ms is not None and r.predicted_tpot_ms == pytest.approx(20.0) for r in result.records)
    assert all(r.model_versions == {"ttft": 3, "tpot": 3} for r in result.records)


def slowed_servers_share(producer_params=None, seeds=range(3, 9)):
    """Over a few seeds, server-0's share of the requests before it slows down 4× at 5 s, and after 10 s."""
    from headroom.sim.pool import slow_down
    early, late = [], []
    for seed in seeds:
        requests = generate(poisson_arrivals(rate=20.0, duration_s=20.0, seed=seed), seed=seed)
        pick = engine_pick(TablePredictor(base=100.0), slo=None,
                           plugin_params={"predicted-latency-producer": producer_params or {}})
        result = run(requests, uniform_pool(4), pick, seed=0, actions=[(5.0, slow_down("server-0", 4.0))])
        for r in result.records:
            at = r.dispatch_ts - 1_700_000_000.0
            (early if at < 5.0 else late if at > 10.0 else []).append(r.server_id == "server-0")
    return sum(early) / len(early), sum(late) / len(late)


def test_the_simulated_router_learns_a_slowed_server_from_its_streams():
    early, late = slowed_servers_share()
    assert early > 0.05  # it took requests before
    assert late < 0.05  # priced slower, so it is left the requests the others cannot take
    assert slowed_servers_share({"latencyCorrection": False, "prefillFloor": False})[1] > 2 * late


@pytest.mark.parametrize("overlay, message", [
    pytest.param({"plugin_params": {"prefix-cache-affinity-filter": {"affinityThreshold": 1.5}}},
                 r"plugin 'affinity': parameter 'affinityThreshold' must be within", id="plugin-params"),
    pytest.param({"scorer_params": {"headroomSelectionStrategy": "sideways"}},
                 r"plugin 'latency': parameter 'headroomSelectionStrategy'", id="scorer-params"),
    pytest.param({"picker_params": {"sharpness": 0.0}}, r"plugin 'picker': parameter 'sharpness'", id="picker-params"),
])
def test_parameter_overlays_reach_their_plugins(overlay, message):
    with pytest.raises(ConfigError, match=message):
        engine_pick(TablePredictor(), **overlay)


def test_sheddable_requests_are_shed_and_running_tpot_slos_reach_the_pipeline():
    seen = []
    busy = [SimRequest(f"b{i}", 0.001 * i, 8000, 400, slo_ttft_ms=5000.0, slo_tpot_ms=40.0) for i in range(3)]
    late = [SimRequest("shed-me", 0.5, 500, 10, slo_ttft_ms=50.0, priority=-1), SimRequest("keep-me", 0.6, 500, 10)]
    pick = engine_pick(TablePredictor(base=100.0))

    def watching(request, view):
        seen.append((request.request_id, view.running_tpot_slos[0]))
        return pick(request, view)

    result = run(busy + late, uniform_pool(1), watching, seed=0)
    assert [(d.request.request_id, "priority -1" in d.reason) for d in result.dropped] == [("shed-me", True)]
    assert {o.request.request_id for o in result.outcomes} == {"b0", "b1", "b2", "keep-me"}
    assert seen[-1] == ("keep-me", (40.0, 40.0, 40.0))  # the SLOs the router holds its running streams to


@pytest.mark.parametrize("cap", [3.0, None])  # None: the default, 5
def test_a_burst_of_late_requests_is_spread_under_the_cap(cap):
    # 400 requests in 1.6 s on 4 servers whose TTFT is 100 ms + 50 ms per waiting request: most are late
    slo_ttft = 300.0
    predictor = TablePredictor(base=100.0, per_waiting=50.0)
    pick = engine_pick(predictor, slo=(slo_ttft, 50.0), plugin_params={
        "predicted-latency-producer": {"latencyCorrection": False, "prefillFloor": False},  # the model's TTFT
        "late-concentration-filter": {"holdCap": 0, **({"lateCap": cap} if cap else {})}})  # sent at once
    cap = cap or 5.0
    late = []  # (least predicted TTFT over the pool, the chosen server's, the chosen server)

    def watching(request, view):
        calls = len(predictor.calls)
        result = pick(request, view)
        ttft = 100.0 + 50.0 * predictor.calls[-1][1][:, 1] if len(predictor.calls) > calls else None
        if ttft is not None and ttft.min() > slo_ttft:
            chosen = [s.server_id for s in view.snapshots].index(result.server_id)
            late.append((ttft.min(), ttft[chosen], result.server_id))
        return result

    run([SimRequest(f"r{i}", 0.004 * i, 1500, 40) for i in range(400)], uniform_pool(4), watching, seed=0)
    assert len(late) > 200
    assert {server for _, _, server in late} == {f"server-{i}" for i in range(4)}
    # within the cap where any server is; past it, only where the request is least late
    assert all(chosen <= max(cap * slo_ttft, least) for least, chosen, _ in late)


def test_the_late_requests_of_a_burst_wait_at_the_router_for_an_idle_server():
    # the burst above, with late requests held at the router for up to 3 × their TTFT SLO
    slo_ttft, cap = 300.0, 3.0
    params = {"predicted-latency-producer": {"latencyCorrection": False, "prefillFloor": False}}
    requests = [SimRequest(f"r{i}", 0.004 * i, 1500, 40) for i in range(400)]
    asked: dict[str, list[tuple[float, object, bool]]] = {}  # request id -> (waited s, decision, any server idle)

    def watching(pick):
        def watched(request, view):
            decision = pick(request, view)
            idle = any(s.metrics.num_running == s.metrics.num_waiting == n == 0
                       for s, n in zip(view.snapshots, view.inflight_requests))
            asked.setdefault(request.request_id, []).append((view.now - request.arrival_s, decision, idle))
            return decision
        return watched

    held = run(requests, uniform_pool(4), watching(engine_pick(TablePredictor(base=100.0, per_waiting=50.0),
        slo=(slo_ttft, 50.0), plugin_params={**params, "late-concentration-filter": {"holdCap": cap}})), seed=0)
    sent = run(requests, uniform_pool(4), engine_pick(TablePredictor(base=100.0, per_waiting=50.0), slo=(slo_ttft, 50.0),
        plugin_params={**params, "late-concentration-filter": {"holdCap": 0}}), seed=0)
    waited = {rid: calls for rid, calls in asked.items() if len(calls) > 1}
    assert len(waited) > 100 and len(held.outcomes) == len(requests)
    for calls in waited.values():
        *holds, (waited_s, decision, idle) = calls
        assert all(isinstance(d, Hold) for _, d, _ in holds) and not isinstance(decision, Hold)
        assert idle or waited_s * 1000.0 >= cap * slo_ttft  # let go for capacity nobody in time could use, or at the cap
    order = [o.request.request_id for o in sorted(held.outcomes, key=lambda o: o.submitted_s) if o.request.request_id in waited]
    assert order == sorted(order, key=lambda rid: int(rid[1:]))  # the pool drains them oldest first
    ttft = {name: sorted(o.ttft_ms for o in result.outcomes) for name, result in (("held", held), ("sent", sent))}
    met = {name: sum(t <= slo_ttft for t in values) for name, values in ttft.items()}
    assert met["held"] > met["sent"]  # who waits at the router takes capacity from nobody who could be in time
    assert ttft["held"][len(requests) // 2] < 0.8 * ttft["sent"][len(requests) // 2]
    assert ttft["held"][-4] < 1.05 * ttft["sent"][-4]  # and the tail is the pool's, not one server's
