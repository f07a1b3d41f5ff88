"""Several router replicas sharing one pool: each sees only its own in-flight requests (and, if asked, only
the prefixes it sent itself)."""

from __future__ import annotations

import pytest

from headroom.sim.pool import SimulationError, run, uniform_pool
from headroom.sim.request import SimRequest


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
