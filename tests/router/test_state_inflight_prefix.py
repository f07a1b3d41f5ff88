import random

from headroom.contract.prompt import token_block_hashes as block_hashes
from headroom.router.state.inflight import Inflight
from headroom.router.state.prefix_index import PrefixIndex


def test_inflight_counts_and_never_negative():
    inflight = Inflight(ttl_s=60)
    inflight.start("r1", "a", 100, 30.0, now=0)
    inflight.start("r2", "a", 50, None, now=1)
    inflight.start("r3", "b", 10, None, now=1)
    load = inflight.load()
    assert (load["a"].requests, load["a"].prompt_tokens, load["a"].tpot_slos_ms) == (2, 150, (30.0,))
    inflight.finish("r1")
    inflight.finish("r1")
    inflight.finish("unknown")
    assert inflight.load()["a"].requests == 1 and len(inflight) == 2
    inflight.finish("r2")
    inflight.finish("r3")
    assert inflight.load() == {}


def test_prefill_tokens_count_streaming_requests_until_their_first_token():
    inflight = Inflight(ttl_s=60)
    inflight.start("s1", "a", 100, None, now=0, stream=True)
    inflight.start("s2", "a", 40, None, now=0, stream=True)
    inflight.start("n1", "a", 500, None, now=0)  # non-streaming: its first token is never seen
    assert (inflight.load_of("a").prompt_tokens, inflight.load_of("a").prefill_tokens) == (640, 140)
    assert inflight.first_token("s1", now=1.0).server_id == "a"
    assert inflight.first_token("s1", now=1.0) is None and inflight.first_token("n1", now=1.0) is None
    assert inflight.first_token("unknown", now=1.0) is None
    assert inflight.load_of("a").prefill_tokens == 40
    inflight.finish("s1")  # already past its first token: nothing more to release
    inflight.finish("s2")  # finished before its first token was seen
    assert (inflight.load_of("a").requests, inflight.load_of("a").prefill_tokens) == (1, 0)


def test_inflight_expires_with_ttl():
    inflight = Inflight(ttl_s=10)
    inflight.start("old", "a", 100, None, now=0)
    inflight.start("new", "a", 100, None, now=8)
    assert inflight.expire(now=11) == ["a"]
    assert inflight.load()["a"].requests == 1


def test_block_hashes_chain():
    a = block_hashes(list(range(40)))
    b = block_hashes(list(range(32)) + [99] * 8)
    c = block_hashes([7] + list(range(1, 40)))
    assert len(a) == 2 and a == b  # the partial third block is not hashed
    assert c[0] != a[0] and c[1] != a[1]  # a change in block 0 changes every later hash


def test_prefix_match_fraction_and_lru():
    index = PrefixIndex(max_blocks=4)
    shared = block_hashes(list(range(64)))  # 4 blocks
    index.record("a", shared)
    assert index.match("a", shared, 64) == 1.0
    assert index.match("a", shared[:2] + (1, 2), 64) == 0.5
    assert index.match("b", shared, 64) == 0.0
    index.record("a", block_hashes(list(range(1000, 1032))))  # 2 new blocks evict the 2 oldest
    assert index.size("a") == 4
    assert index.match("a", shared, 64) == 0.0  # leading block evicted
    index.forget("a")
    assert index.size("a") == 0


def test_matches_walks_all_servers_at_once():
    index = PrefixIndex()
    prompt = block_hashes(list(range(160)))  # 10 blocks
    index.record("full", prompt)
    index.record("half", prompt[:5])
    index.record("other", block_hashes(list(range(500, 660))))
    assert index.matches(prompt, 160) == {"full": 1.0, "half": 0.5}
    index.forget("full")
    assert index.matches(prompt, 160) == {"half": 0.5}


def _leading_run(held: set[int], hashes: tuple[int, ...]) -> int:
    run = 0
    for h in hashes:
        if h not in held:
            break
        run += 1
    return run


def test_matches_agree_with_a_per_server_walk_under_eviction_and_reuse():
    rng = random.Random(3)
    index = PrefixIndex(max_blocks=12)
    chains = [block_hashes([k] * 16 + list(range(300))) for k in range(3)]  # 19 blocks, a different first one each
    for step in range(3000):
        server_id = f"s{rng.randrange(8)}"
        if rng.random() < 0.02:
            index.forget(server_id)  # its bit is reused by the next server the index sees
        else:
            index.record(server_id, rng.choice(chains)[: rng.randrange(1, 20)])
        prompt = rng.choice(chains)[: rng.randrange(0, 20)]
        tokens = 16 * len(prompt) + rng.randrange(0, 40)
        expected = {}
        for sid in (f"s{i}" for i in range(8)):
            run = _leading_run(set(index._servers.get(sid, ())), prompt)
            if run and tokens:
                expected[sid] = min(1.0, run * (16 / tokens))
        assert index.matches(prompt, tokens) == expected, step
        bits = index.bits([f"s{i}" for i in range(8)])
        column = index.fractions(prompt, tokens)
        assert column[bits].tolist() == [expected.get(f"s{i}", 0.0) for i in range(8)]
