"""Property-based invariants of the engine and the pool runner."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from headroom.contract.telemetry import decode, encode
from headroom.sim.engine import ServerEngine
from headroom.sim.policies import policy
from headroom.sim.pool import run, uniform_pool
from headroom.sim.profile import H100
from headroom.sim.request import SimRequest

request_specs = st.lists(
    st.tuples(st.floats(0.0, 0.3), st.integers(1, 700), st.integers(1, 150), st.integers(0, 3), st.booleans()),
    min_size=1, max_size=25)


def _requests(specs) -> list[SimRequest]:
    requests, t = [], 0.0
    for i, (gap, prompt, output, prefix, stream) in enumerate(specs):
        t += gap
        blocks = min(prompt // 16, 8 * prefix)
        hashes = tuple(prefix * 1000 + j for j in range(blocks)) if prefix else ()
        requests.append(SimRequest(f"r{i}", t, prompt, output, prefix_hashes=hashes, stream=stream))
    return requests


@settings(max_examples=60, deadline=None)
@given(specs=request_specs, blocks=st.integers(20, 200), slots=st.integers(1, 8), noise=st.sampled_from([0.0, 0.3]),
       seed=st.integers(0, 5))
def test_engine_conserves_tokens_and_blocks(specs, blocks, slots, noise, seed) -> None:
    profile = H100.with_(kv_blocks=blocks, max_num_seqs=slots, token_budget=256, noise=noise)
    requests = _requests(specs)
    engine = ServerEngine(profile, seed=seed, record_tokens=True)
    now, i = 0.0, 0
    for _ in range(200_000):
        arrival = requests[i].arrival_s if i < len(requests) else math.inf
        wake = engine.next_wake(now)
        if wake is None and arrival == math.inf:
            break
        if wake is not None and wake <= arrival:
            now = max(now, wake)
            engine.advance_to(now)
        else:
            now = arrival
            engine.submit(requests[i], now)
            i += 1
        cache = engine.cache
        assert 0 <= cache.used <= cache.capacity
        assert cache.cached >= 0 and cache.free >= 0
    assert not engine.busy
    finished = {o.request.request_id: o for o in engine.finished}
    dropped = {d.request.request_id for d in engine.dropped}
    assert set(finished) | dropped == {r.request_id for r in requests}
    assert not set(finished) & dropped
    for o in finished.values():
        assert o.output_tokens == o.request.output_tokens == len(o.token_times)
        assert o.request.arrival_s <= o.first_token_s <= o.completion_s
    assert engine.cache.used == 0


@settings(max_examples=15, deadline=None)
@given(specs=request_specs, servers=st.integers(1, 3), name=st.sampled_from(["random", "composite", "least-kv"]))
def test_pool_runs_repeat_and_account_for_every_request(specs, servers, name) -> None:
    requests = _requests(specs)
    pool = uniform_pool(servers, H100.with_(kv_blocks=60, max_num_seqs=4, token_budget=256, noise=0.2))
    first = run(requests, pool, policy(name, seed=3), seed=7)
    second = run(requests, pool, policy(name, seed=3), seed=7)
    assert [encode(r) for r in first.records] == [encode(r) for r in second.records]
    assert len(first.records) + len(first.dropped) == len(requests)
    for record in first.records:
        assert decode(encode(record)) == record
