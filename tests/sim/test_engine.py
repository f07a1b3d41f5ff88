from __future__ import annotations

import pytest

from headroom.sim.engine import ServerEngine
from headroom.sim.profile import H100
from headroom.sim.request import SimRequest


def drain(engine: ServerEngine, until: float = 600.0) -> None:
    engine.advance_to(until)
    assert not engine.busy


def test_prefix_hit_skips_prefill_and_is_counted() -> None:
    shared = tuple(range(100, 164))  # 64 blocks = 1,024 tokens
    engine = ServerEngine(H100)
    engine.submit(SimRequest("a", 0.0, 2000, 1, prefix_hashes=shared), 0.0)
    engine.submit(SimRequest("b", 1.0, 2000, 1, prefix_hashes=shared), 1.0)
    drain(engine)
    first, second = engine.finished
    assert second.cached_prompt_tokens == 1024
    assert second.ttft_ms < first.ttft_ms - 15.0  # 1,024 tokens at 0.02 ms each are skipped
    assert (engine.prefix_queries, engine.prefix_hits) == (4000, 1024)
    assert engine.prefix_match(SimRequest("c", 2.0, 4096, 1, prefix_hashes=shared)) == pytest.approx(0.25)


def test_long_prompt_is_prefilled_in_chunks_of_the_token_budget() -> None:
    engine = ServerEngine(H100)
    engine.submit(SimRequest("long", 0.0, 3 * 2048, 1), 0.0)
    drain(engine)
    # three chunks, each about a fresh 2,048-token prefill plus its attention over earlier chunks
    assert engine.finished[0].ttft_ms == pytest.approx(3 * 47.46 + 1.3e-6 * 2048 * (1024 + 3072 + 5120), rel=0.01)


def test_slot_limit_queues_requests() -> None:
    engine = ServerEngine(H100.with_(max_num_seqs=2, token_budget=2048))
    for i in range(3):
        engine.submit(SimRequest(f"r{i}", 0.0, 100, 50), 0.0)
    engine.advance_to(0.1)
    assert (engine.num_running, engine.num_waiting) == (2, 1)
    drain(engine)
    third = next(o for o in engine.finished if o.request.request_id == "r2")
    assert third.first_token_s > max(o.completion_s for o in engine.finished if o.request.request_id != "r2") - 1e-9


def test_block_exhaustion_preempts_the_newest_and_everything_still_completes() -> None:
    engine = ServerEngine(H100.with_(kv_blocks=40), record_tokens=True)  # 640 tokens of KV
    for i in range(4):
        engine.submit(SimRequest(f"r{i}", i * 0.001, 100, 120), i * 0.001)
    drain(engine)
    assert len(engine.finished) == 4
    assert sum(o.preemptions for o in engine.finished) > 0
    newest = max(engine.finished, key=lambda o: o.request.arrival_s)
    assert newest.preemptions > 0
    assert all(len(o.token_times) == o.output_tokens == 120 for o in engine.finished)
    assert engine.cache.used == 0


def test_request_larger_than_the_cache_is_dropped_with_a_reason() -> None:
    engine = ServerEngine(H100.with_(kv_blocks=10, max_num_seqs=4, token_budget=256))
    assert not engine.submit(SimRequest("big", 0.0, 200, 1), 0.0)
    assert "needs 13 KV blocks" in engine.dropped[0].reason


def test_token_times_match_ttft_and_tpot() -> None:
    engine = ServerEngine(H100, record_tokens=True)
    for i in range(5):
        engine.submit(SimRequest(f"r{i}", i * 0.01, 300 + 50 * i, 20 + i), i * 0.01)
    drain(engine)
    for o in engine.finished:
        times = o.token_times
        assert len(times) == o.output_tokens
        assert times == tuple(sorted(times))
        assert (times[0] - o.request.arrival_s) * 1000 == pytest.approx(o.ttft_ms)
        assert (times[-1] - times[0]) * 1000 / (len(times) - 1) == pytest.approx(o.tpot_ms)


def test_streamed_steps_are_the_last_two_token_steps_a_router_has_seen() -> None:
    def engine(record_tokens: bool = False, stream: bool = True) -> ServerEngine:
        server = ServerEngine(H100, record_tokens=record_tokens)
        server.submit(SimRequest("r", 0.0, 500, 200, stream=stream), 0.0)
        return server

    def advance_as_the_pool_does(server: ServerEngine, now: float) -> ServerEngine:
        for _ in range(10_000):  # wakes come at step ends, or at the end of a whole decode segment
            wake = server.next_wake(server.clock)
            if wake is None or wake > now:
                return server
            server.advance_to(wake)
        raise AssertionError("too many wakes")

    recorded = engine(record_tokens=True)
    drain(recorded)
    times = recorded.finished[0].token_times
    for now in (times[0] + 1e-6, times[50] + 1e-4, times[120] + 1e-4):
        seen = tuple(t for t in times if t <= now)[-2:]
        assert advance_as_the_pool_does(engine(), now).streamed_steps(now) == pytest.approx(seen, abs=1e-9)
        stepped = engine()
        stepped.advance_to(now)
        assert stepped.streamed_steps(now) == pytest.approx(seen, abs=1e-9)
    assert advance_as_the_pool_does(engine(stream=False), times[50]).streamed_steps(times[50]) == ()


def test_stream_progress_is_what_relaying_the_stream_has_shown() -> None:
    recorded = ServerEngine(H100, record_tokens=True)
    recorded.submit(SimRequest("r", 0.0, 500, 200), 0.0)
    drain(recorded)
    times = recorded.finished[0].token_times
    for now in (times[0] + 1e-6, times[60] + 1e-4, times[150] + 1e-4):
        seen = [t for t in times if t <= now]
        lazy = ServerEngine(H100)  # advanced only to the wakes, as the pool does: a decode segment stays planned
        lazy.submit(SimRequest("r", 0.0, 500, 200), 0.0)
        while (wake := lazy.next_wake(lazy.clock)) is not None and wake <= now:
            lazy.advance_to(wake)
        ((rid, first, tokens, last),) = lazy.stream_progress(now)
        assert (rid, tokens) == ("r", len(seen))
        assert (first, last) == pytest.approx((seen[0], seen[-1]), abs=1e-9)
    quiet = ServerEngine(H100)
    quiet.submit(SimRequest("n", 0.0, 500, 200, stream=False), 0.0)
    quiet.advance_to(times[60])
    assert quiet.stream_progress(times[60]) == []  # a response that does not stream shows nothing


def test_event_jumping_gives_the_same_times_as_stepping() -> None:
    def finish_times(max_jump: int) -> list[float]:
        engine = ServerEngine(H100, max_jump=max_jump)
        for i in range(30):
            engine.submit(SimRequest(f"r{i}", i * 0.013, 200 + 37 * i, 5 + 13 * i), i * 0.013)
        drain(engine)
        return sorted(o.completion_s for o in engine.finished)

    assert finish_times(1 << 30) == pytest.approx(finish_times(1), rel=1e-9)


def test_slowdown_stretches_steps() -> None:
    fast, slow = ServerEngine(H100), ServerEngine(H100)
    slow.set_slowdown(2.0, 0.0)
    for engine in (fast, slow):
        engine.submit(SimRequest("r", 0.0, 1000, 50), 0.0)
        drain(engine)
    assert slow.finished[0].e2e_ms == pytest.approx(2 * fast.finished[0].e2e_ms)


def test_noise_is_seeded() -> None:
    def e2e(seed: int) -> float:
        engine = ServerEngine(H100.with_(noise=0.2), seed=seed)
        engine.submit(SimRequest("r", 0.0, 1000, 50), 0.0)
        drain(engine)
        return engine.finished[0].e2e_ms

    assert e2e(1) == e2e(1)
    assert e2e(1) != e2e(2)


def test_fork_runs_independently() -> None:
    def started() -> ServerEngine:
        engine = ServerEngine(H100)
        engine.submit(SimRequest("a", 0.0, 1000, 100), 0.0)
        engine.advance_to(0.2)
        return engine

    engine, untouched = started(), started()
    twin = engine.fork()
    twin.submit(SimRequest("b", 0.2, 1000, 10), 0.2)
    drain(twin)
    drain(engine)
    drain(untouched)
    assert len(twin.finished) == 2 and len(engine.finished) == 1
    assert engine.finished[0].completion_s == untouched.finished[0].completion_s  # the twin's work left it alone
    twin_a = next(f for f in twin.finished if f.request.request_id == "a")
    assert twin_a.completion_s > engine.finished[0].completion_s  # in the twin, "b" shared a's batch steps


def test_a_shrunk_kv_cache_preempts_the_newest_requests_until_the_rest_fit() -> None:
    engine = ServerEngine(H100.with_(kv_blocks=400))
    for i in range(4):  # 1,000 + 500 tokens: 94 blocks each once done, 376 of the 400 in all
        engine.submit(SimRequest(f"r{i}", 0.0, 1000, 500), 0.0)
    engine.advance_to(1.0)
    assert engine.num_running == 4 and engine.cache.used > 250
    engine.set_kv_capacity(100, 1.0)
    assert engine.kv_capacity == 100
    engine.advance_to(1.2)
    assert engine.cache.capacity == 100 and engine.cache.used <= 100
    assert engine.num_running == 1 and engine.num_waiting == 3  # only the oldest still fits
    drain(engine)
    by_id = {o.request.request_id: o for o in engine.finished}
    assert sorted(by_id) == ["r0", "r1", "r2", "r3"] and not engine.dropped
    assert by_id["r0"].preemptions == 0 and all(by_id[f"r{i}"].preemptions >= 1 for i in (1, 2, 3))
    assert by_id["r3"].completion_s > by_id["r0"].completion_s + 1.0  # recomputed after the others


def test_a_shrunk_kv_cache_drops_the_requests_that_can_never_fit_and_refuses_new_ones() -> None:
    engine = ServerEngine(H100.with_(kv_blocks=400))
    engine.submit(SimRequest("small", 0.0, 100, 2000), 0.0)  # 132 blocks in the end
    engine.submit(SimRequest("big", 0.0, 3000, 1000), 0.0)  # 250 blocks
    engine.advance_to(0.5)
    assert engine.num_running == 2
    engine.set_kv_capacity(150, 0.5)  # the newest is preempted, and could never come back
    drain(engine)
    assert [o.request.request_id for o in engine.finished] == ["small"]
    assert [(d.request.request_id, d.reason) for d in engine.dropped] == [("big", "needs 250 KV blocks, server has 150")]
    assert not engine.submit(SimRequest("late", 700.0, 3000, 1000), 700.0)
    assert engine.dropped[-1].reason == "needs 250 KV blocks, server has 150"
    with pytest.raises(ValueError, match="positive number of blocks"):
        engine.set_kv_capacity(0, 700.0)


def test_a_grown_kv_cache_admits_what_waited_for_blocks() -> None:
    engine = ServerEngine(H100.with_(kv_blocks=100))
    for i in range(3):  # 63 blocks each: one at a time fits
        engine.submit(SimRequest(f"r{i}", 0.0, 900, 100), 0.0)
    engine.advance_to(0.05)
    assert engine.num_running == 1
    engine.set_kv_capacity(400, 0.05)
    engine.advance_to(0.3)
    assert engine.num_running == 3


def test_a_streams_early_tpot_is_timed_at_the_token_a_router_times_it_by() -> None:
    def run(early_tpot_tokens: int) -> ServerEngine:
        engine = ServerEngine(H100, record_tokens=True, early_tpot_tokens=early_tpot_tokens)
        for i in range(6):
            engine.submit(SimRequest(f"r{i}", i * 0.05, 300 + 40 * i, 10 + 25 * i, stream=i != 3), i * 0.05)
        drain(engine)
        return engine

    engine = run(16)
    times = {o.request.request_id: o.token_times for o in engine.finished}
    expected = sorted((rid, times[rid][16]) for rid in times if rid != "r3" and len(times[rid]) > 16)
    got = sorted((r.request_id, t) for r, t in engine.early_tpots)
    assert [rid for rid, _ in got] == [rid for rid, _ in expected] == ["r1", "r2", "r4", "r5"]
    assert [t for _, t in got] == pytest.approx([t for _, t in expected], abs=1e-9)
    assert run(0).early_tpots == []
    recorded = ServerEngine(H100, record_tokens=True)
    recorded.submit(SimRequest("r", 0.0, 500, 200), 0.0)
    drain(recorded)
    timed = recorded.finished[0].token_times[16]
    for now, seen in ((timed - 1e-6, []), (timed + 1e-6, [timed])):
        lazy = ServerEngine(H100, early_tpot_tokens=16)  # advanced only to its wakes, as the pool does
        lazy.submit(SimRequest("r", 0.0, 500, 200), 0.0)
        while (wake := lazy.next_wake(lazy.clock)) is not None and wake <= now:
            lazy.advance_to(wake)
        lazy.early_tpots_by(now)  # inside a decode segment not yet committed
        assert [t for _, t in lazy.early_tpots] == pytest.approx(seen, abs=1e-9)
