"""Several router replicas sharing one pool: each sees only its own in-flight requests (and, if asked, only
the prefixes it sent itself)."""

from __future__ import annotations

import pytest

from headroom.sim.pool import SimulationError, run, uniform_pool
from headroom.sim.request import SimRequest
from headroom.sim.view import Pick, Shed


def recorder(seen: list, router: int, choose=lambda view: view.snapshots[0].server_id):
    """A pick function that notes what router ``router`` saw at each dispatch."""
    def pick(request, view):
        seen.append((router, request.request_id, view.now, sum(view.inflight_requests), view.prefix_match(0)))
        return choose(view)
    return pick


def test_each_router_counts_only_its_own_requests_in_flight():
    requests = [SimRequest(f"r{i}", 0.01 * i, 500, 200) for i in range(200)]
    seen: list = []
    result = run(requests, uniform_pool(2), [recorder(seen, r, lambda v: v.snapshots[len(seen) % 2].server_id)
                                             for r in range(3)], routers=3, seed=4)
    done = {o.request.request_id: o.completion_s for o in result.outcomes}
    routed = {rid: router for router, rid, *_ in seen}
    assert set(routed.values()) == {0, 1, 2}
    for router, rid, now, inflight, _ in seen:
        own = sum(1 for other, r in routed.items()
                  if r == router and other != rid and float(other[1:]) * 0.01 < now < done[other])
        assert inflight == own
    everyone = max(sum(1 for other in routed if float(other[1:]) * 0.01 < now < done[other])
                   for _, _, now, _, _ in seen)
    assert everyone > max(inflight for *_, inflight, _ in seen)  # no router saw all of them


@pytest.mark.parametrize("knowledge, second_router_first_match", [("cache", "positive"), ("router", "zero")])
def test_a_router_knows_the_prefixes_it_sent_itself_or_the_cache(knowledge, second_router_first_match):
    prefix = tuple(range(1000, 1040))  # 40 shared blocks: 640 of the 1,000 prompt tokens
    requests = [SimRequest(f"r{i}", 0.5 * i, 1000, 5, prefix_hashes=prefix) for i in range(20)]
    seen: list = []
    run(requests, uniform_pool(1), [recorder(seen, r) for r in range(2)], routers=2, seed=1,
        prefix_knowledge=knowledge)
    first = {}
    for router, _, _, _, match in seen:
        first.setdefault(router, match)
    later = [match for router, _, _, _, match in seen if router == seen[0][0]][1:]
    assert first[seen[0][0]] == 0.0 and min(later) == pytest.approx(0.64)
    other = 1 - seen[0][0]
    assert (first[other] > 0.0) == (second_router_first_match == "positive")


def test_routers_need_one_pick_function_each():
    requests = [SimRequest("r0", 0.0, 100, 2)]
    with pytest.raises(SimulationError, match="2 routers need as many pick functions"):
        run(requests, uniform_pool(1), [lambda r, v: v.snapshots[0].server_id] * 3, routers=2)


def test_each_router_holds_only_the_streams_it_relays_and_their_lengths():
    requests = [SimRequest(f"r{i}", 0.01 * i, 500, 20 + i % 7, slo_tpot_ms=40.0 + i) for i in range(200)]
    seen: list = []

    def pick(router):
        def choose(request, view):
            seen.append((router, request.request_id, view.now, sorted(x for s in view.running_tpot_slos for x in s),
                         len(view.lengths), view.tpot_at_risk(0)))
            return view.snapshots[0].server_id
        return choose

    result = run(requests, uniform_pool(1), [pick(r) for r in range(2)], routers=2, seed=3, lengths=[10] * 5)
    done = {o.request.request_id: o for o in result.outcomes}
    routed = {rid: router for router, rid, *_ in seen}
    assert set(routed.values()) == {0, 1}
    for router, rid, now, slos, lengths, _ in seen:
        own = [r for r, by in routed.items() if by == router and r != rid]
        running = sorted(40.0 + int(r[1:]) for r in own if float(r[1:]) * 0.01 < now < done[r].completion_s)
        assert slos == running
        assert lengths == 5 + sum(1 for r in own if done[r].completion_s <= now)


def test_a_shed_request_is_dropped_with_its_reason_whichever_router_sheds_it():
    requests = [SimRequest(f"r{i}", 0.1 * i, 100, 2) for i in range(40)]
    sheds = [lambda request, view: Shed("router 0 sheds"), lambda request, view: view.snapshots[0].server_id]
    result = run(requests, uniform_pool(1), sheds, routers=2, seed=2)
    assert {d.reason for d in result.dropped} == {"router 0 sheds"}
    assert 0 < len(result.dropped) < 40 and len(result.dropped) + len(result.outcomes) == 40


def test_each_router_records_its_own_streams_tpot_against_the_prediction_it_placed_them_with():
    requests = [SimRequest(f"r{i}", 0.01 * i, 500, 20) for i in range(100)]
    routed, views = {}, {}

    def pick(router):
        def choose(request, view):
            routed[request.request_id], views[router] = router, view
            return Pick(view.snapshots[0].server_id, predicted_tpot_ms=10.0 * (router + 1))
        return choose

    result = run(requests, uniform_pool(1), [pick(r) for r in range(2)], routers=2, seed=3)
    for router, view in views.items():
        got = [o.tpot_ms / (10.0 * (router + 1)) for o in result.outcomes if routed[o.request.request_id] == router]
        assert len(view.tpot_ratios) == len(got) > 10
        assert view.tpot_ratios.quantile(view.snapshots[0].pool_key, 1.0, 1000, 1) == pytest.approx(max(got))
