from __future__ import annotations

import pytest

from headroom.contract.server_metrics import ServerMetrics
from headroom.sim.engine import ServerEngine
from headroom.sim.policies import POLICIES, policy
from headroom.sim.profile import H100
from headroom.sim.records import MetricsSnapshot
from headroom.sim.request import SimRequest
from headroom.sim.view import PoolView


def _view(waiting: list[int], kv: list[float], inflight: list[int],
          cached_blocks: list[int]) -> tuple[PoolView, SimRequest]:
    request = SimRequest("r", 0.0, 640, 10, prefix_hashes=tuple(range(40)))
    view = PoolView()
    engines = []
    for i, blocks in enumerate(cached_blocks):
        engine = ServerEngine(H100, f"s{i}")
        engine.cache.allocate(blocks)
        for h in range(blocks):
            engine.cache.register(h)
        engines.append(engine)
    view.snapshots = [MetricsSnapshot(f"s{i}", "h100", "h100", 0.0, ServerMetrics(num_waiting=w, num_running=0,
                                                                                 kv_cache_usage=k))
                      for i, (w, k) in enumerate(zip(waiting, kv))]
    view.inflight_requests = list(inflight)
    view.inflight_prompt_tokens = [0] * len(waiting)
    view.inflight_prefill_tokens = [100 * n for n in inflight]
    view.inflight_decode_tokens = [50 * n for n in inflight]
    view._engines = engines
    view._start(request, 0.0)
    return view, request


@pytest.mark.parametrize("name, waiting, kv, inflight, cached, expected", [
    ("least-queue", [3, 1, 2], [0.1, 0.9, 0.5], [0, 0, 0], [0, 0, 0], "s1"),
    ("least-queue", [1, 1, 2], [0.1, 0.9, 0.5], [4, 2, 0], [0, 0, 0], "s1"),
    ("least-kv", [3, 1, 2], [0.4, 0.9, 0.2], [0, 0, 0], [0, 0, 0], "s2"),
    ("composite", [0, 0, 0], [0.5, 0.5, 0.5], [0, 0, 0], [0, 40, 10], "s1"),
    ("composite", [5, 0, 0], [0.9, 0.1, 0.1], [0, 0, 0], [40, 0, 0], "s1"),
    ("composite", [0, 0, 0], [0.2, 0.6, 0.6], [0, 0, 0], [0, 0, 0], "s0"),
    ("prefix-least-queue", [1, 2, 0], [0.5, 0.5, 0.5], [0, 0, 0], [10, 40, 0], "s0"),
    ("prefix-least-queue", [0, 0, 0], [0.5, 0.5, 0.5], [3, 1, 0], [20, 20, 0], "s1"),
    ("prefix-least-queue", [3, 0, 0], [0.5, 0.5, 0.5], [0, 2, 1], [40, 0, 0], "s2"),
], ids=["lq-fewest-waiting", "lq-tie-fewest-inflight", "kv-lowest", "composite-prefix",
        "composite-load-beats-prefix", "composite-kv", "plq-prefix-within-slack", "plq-tie-fewest-inflight",
        "plq-queue-beyond-slack"])
def test_pick_table(name, waiting, kv, inflight, cached, expected) -> None:
    view, request = _view(waiting, kv, inflight, cached)
    assert policy(name)(request, view) == expected


def test_round_robin_cycles_and_random_is_seeded() -> None:
    view, request = _view([0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0])
    rr = policy("round-robin")
    assert [rr(request, view) for _ in range(4)] == ["s0", "s1", "s2", "s0"]
    first, again, other = policy("random", seed=4), policy("random", seed=4), policy("random", seed=5)
    draws = [first(request, view) for _ in range(20)]
    assert [again(request, view) for _ in range(20)] == draws
    assert len(set(draws)) > 1
    assert [other(request, view) for _ in range(20)] != draws


def test_every_policy_picks_a_listed_server_without_touching_the_view() -> None:
    view, request = _view([1, 2, 0], [0.3, 0.1, 0.5], [1, 0, 2], [5, 0, 0])
    before = (list(view.snapshots), list(view.inflight_requests))
    for name in POLICIES:
        assert policy(name)(request, view) in {"s0", "s1", "s2"}
    assert (view.snapshots, view.inflight_requests) == before


def test_unknown_policy() -> None:
    with pytest.raises(ValueError, match="unknown policy 'nope'"):
        policy("nope")


def test_server_state_bundles_what_the_view_knows() -> None:
    view, _ = _view([1, 0], [0.2, 0.4], [3, 1], [10, 0])
    first, second = view.server_state(0), view.server_state(1)
    assert (view.snapshots[0].server_id, first.inflight_requests, first.prefix_match) == ("s0", 3, 0.25)
    assert (first.inflight_prefill_tokens, second.inflight_prefill_tokens) == (300, 100)
    assert (first.inflight_decode_tokens, second.inflight_decode_tokens, first.encoder_matched_size) == (150, 50, 0)
    assert (second.kv_cache_usage, second.prefix_match) == (0.4, 0.0)
