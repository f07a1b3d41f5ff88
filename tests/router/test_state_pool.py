import asyncio
import math

import pytest
from aiohttp import web

from headroom.contract.prompt import token_block_hashes as block_hashes
from headroom.contract.server_metrics import ServerMetrics
from headroom.contract.server_state import NO_TOKEN_AGE_MS, SERVER_FIELDS
from headroom.feedback.latency_corrections import EARLY_TPOT_TOKENS
from headroom.output_lengths import OutputLengths
from headroom.router.errors import ConfigError
from headroom.router.state.pool import PoolState
from headroom.router.state.scraper import MetricsScraper
from headroom.router.state.servers import ServerFile, ServerSpec, parse_servers
from tests.router.routercases import req


def test_snapshot_combines_metrics_inflight_and_prefix():
    pool = PoolState((ServerSpec("a", "127.0.0.1:1"), ServerSpec("b", "127.0.0.1:2", "h100")))
    pool.scraped("a", ServerMetrics(0.5, 2, 3), now=10.0)
    pool.scraped("b", ServerMetrics(0.1, 0, 0), now=9.0)
    hashes = block_hashes(list(range(64)))
    first = req(request_id="r1", prompt_tokens=64, block_hashes=hashes, stream=True, slo_tpot_ms=25.0)
    pool.dispatched(first, "a", now=10.0)
    snaps = {s.server_id: s for s in pool.snapshots(req(prompt_tokens=64, block_hashes=hashes), now=10.5)}
    a, b = snaps["a"], snaps["b"]
    assert (a.kv_cache_usage, a.num_waiting, a.num_running) == (0.5, 2, 3)
    assert (a.inflight_requests, a.inflight_prompt_tokens, a.running_tpot_slos_ms) == (1, 64, (25.0,))
    assert a.prefix_match == 1.0 and b.prefix_match == 0.0
    assert a.metrics_age_s == 0.5 and b.pool_key == "h100"
    assert (a.inflight_prefill_tokens, b.inflight_prefill_tokens) == (64, 0)
    assert list(pool.snapshots(req(), now=10.5).state) == list(SERVER_FIELDS)  # the router measures every field
    pool.token("r1", now=10.55)
    assert pool.snapshots(req(), now=10.6)[0].inflight_prefill_tokens == 0
    pool.completed("r1")
    assert pool.snapshots(req(), now=11)[0].inflight_requests == 0


def test_streams_at_risk_of_their_tpot_slo_from_the_tokens_the_router_relays():
    pool = PoolState((ServerSpec("a", "h:1"), ServerSpec("b", "h:2")))
    for server_id in "ab":
        pool.scraped(server_id, ServerMetrics(0, 0, 0), now=0.0)
    for rid, slo in (("fast", 50.0), ("slow", 50.0), ("free", None)):
        pool.dispatched(req(request_id=rid, stream=True, slo_tpot_ms=slo), "a", now=0.0)
    pool.dispatched(req(request_id="plain", slo_tpot_ms=50.0), "b", now=0.0)  # not streaming: no TPOT

    def at_risk(now):
        return [s.tpot_at_risk for s in pool.snapshots(req(), now)]

    for rid, times in (("fast", (0.10, 0.14, 0.18)), ("slow", (0.10, 0.16, 0.22)), ("free", (0.10, 0.3))):
        for t in times:
            pool.token(rid, t)
    assert at_risk(0.23) == [1, 0]  # "slow": 20 ms behind 50 ms a token; "fast": ahead; "free" has no TPOT SLO
    assert at_risk(0.29) == [2, 0]  # "fast" is behind too if its next token comes only now (190 ms for 4)
    assert at_risk(0.45) == [0, 0]  # both too far behind to be saved by sparing a step or two
    pool.completed("slow")
    pool.completed("fast")
    assert at_risk(0.30) == [0, 0]


def test_streams_at_risk_count_by_the_chance_that_they_end_soon():
    pool = PoolState((ServerSpec("a", "h:1"),))
    pool.scraped("a", ServerMetrics(0, 0, 0), now=0.0)
    pool.dispatched(req(request_id="s", stream=True, slo_tpot_ms=50.0), "a", now=0.0)
    for t in (0.10, 0.16, 0.22):
        pool.token("s", t)  # 20 ms behind its SLO after 3 tokens

    def at_risk():
        return pool.snapshots(req(), 0.23)[0].tpot_at_risk

    assert at_risk() == 1.0  # too few lengths known: it may end any time
    for i in range(60):
        pool.dispatched(req(request_id=f"done{i}", stream=True), "a", now=0.0)
        pool.completed(f"done{i}", output_tokens=200 if i % 2 else 5)
    assert at_risk() == 0.5  # of the streams past 3 tokens, those that ended by 7 (the 5s): half
    pool.lengths = OutputLengths()
    for i in range(60):
        pool.completed(f"gone{i}", output_tokens=200)  # long streams only: it has long to catch up
    assert at_risk() == 0.0


def test_step_rhythm_from_the_tokens_the_router_relays():
    pool = PoolState((ServerSpec("a", "h:1"), ServerSpec("b", "h:2")))
    for server_id in "ab":
        pool.scraped(server_id, ServerMetrics(0, 0, 0), now=0.0)

    def rhythm(now):
        return {s.server_id: (s.last_token_age_ms, s.token_interval_ms) for s in pool.snapshots(req(), now)}

    assert rhythm(1.0) == {"a": (NO_TOKEN_AGE_MS, 0.0), "b": (NO_TOKEN_AGE_MS, 0.0)}  # no token seen yet
    for now in (1.0, 1.0002, 1.0004):  # three streams' tokens of one batch step
        pool.token_seen("a", now)
    pool.token_seen("a", 1.0204)  # the next step
    pool.token_seen("elsewhere", 1.03)  # not a server of the pool: ignored
    a = rhythm(1.0254)["a"]
    assert a == (pytest.approx(5.0), pytest.approx(20.0))
    assert rhythm(1.0254)["b"] == (NO_TOKEN_AGE_MS, 0.0)
    assert rhythm(100.0)["a"] == (NO_TOKEN_AGE_MS, pytest.approx(20.0))  # capped age
    pool.token_seen("a", 100.0)  # after a long pause the interval is unknown again
    assert rhythm(100.001)["a"] == (pytest.approx(1.0), 0.0)
    pool.token_seen("a", 100.02)
    pool.set_servers((ServerSpec("c", "h:3"), ServerSpec("a", "h:1")))  # "a" stays, at another row
    for server_id in "ca":
        pool.scraped(server_id, ServerMetrics(0, 0, 0), now=100.0)
    assert rhythm(100.025) == {"a": (pytest.approx(5.0), pytest.approx(20.0)), "c": (NO_TOKEN_AGE_MS, 0.0)}


def test_unhealthy_servers_leave_candidates_until_none_remain():
    pool = PoolState((ServerSpec("a", "h:1"), ServerSpec("b", "h:2")), unhealthy_after_s=5)
    pool.scraped("a", ServerMetrics(0, 0, 0), now=0)
    pool.scraped("b", ServerMetrics(0, 0, 0), now=4)
    assert [s.server_id for s in pool.snapshots(req(), now=8)] == ["b"]
    assert sorted(s.server_id for s in pool.snapshots(req(), now=100)) == ["a", "b"]
    never = PoolState((ServerSpec("c", "h:3"),))
    assert math.isinf(never.snapshots(req(), now=0)[0].metrics_age_s)


def test_candidates_follow_every_scrape_and_ejection_between_decisions():
    """The pool keeps the oldest scrape and the last ejection's end from one change to the next; the candidates
    are those a check of every server finds, whichever server a scrape lands on."""
    ids = ("a", "b", "c")
    pool = PoolState(tuple(ServerSpec(sid, f"h:{i}") for i, sid in enumerate(ids)), unhealthy_after_s=5)

    def candidates(now):
        return sorted(s.server_id for s in pool.snapshots(req(), now=now))

    for i, sid in enumerate(ids):
        pool.scraped(sid, ServerMetrics(0, 0, 0), now=float(i))
    assert candidates(5.0) == ["a", "b", "c"]
    assert candidates(5.5) == ["b", "c"]  # a's scrape, the oldest, is now too old
    pool.scraped("b", ServerMetrics(0, 0, 0), now=6.0)  # not the oldest: a still is
    assert candidates(6.5) == ["b", "c"]
    pool.scraped("a", ServerMetrics(0, 0, 0), now=7.0)  # the oldest is c's now
    assert candidates(7.0) == ["a", "b", "c"] and candidates(7.5) == ["a", "b"]
    for sid in ids:
        pool.scraped(sid, ServerMetrics(0, 0, 0), now=8.0)
    until = None
    while until is None:  # failures until c is ejected
        until = pool.upstream_failed("c", now=8.0)
    assert candidates(8.0) == ["a", "b"]
    for sid in ids:
        pool.scraped(sid, ServerMetrics(0, 0, 0), now=until - 1.0)
    assert candidates(until - 0.5) == ["a", "b"] and candidates(until) == ["a", "b", "c"]
    assert sorted(s.server_id for s in pool.snapshots(req(), now=until, exclude=frozenset({"a"}))) == ["b", "c"]


def test_server_list_change_drops_state():
    pool = PoolState((ServerSpec("a", "h:1"),))
    pool.dispatched(req(block_hashes=(1, 2)), "a", now=0)
    pool.set_servers((ServerSpec("b", "h:2"),))
    assert list(pool.servers) == ["b"] and pool.prefix.size("a") == 0


def test_server_file_is_reread_when_changed(tmp_path):
    path = tmp_path / "servers.yaml"
    path.write_text("servers:\n  - {id: a, address: '127.0.0.1:8001'}\n")
    watched = ServerFile(path)
    assert [s.server_id for s in watched.servers] == ["a"]
    assert watched.refresh() is False
    path.write_text("servers:\n  - {id: a, address: '127.0.0.1:8001'}\n  - {id: b, address: '127.0.0.1:8002', pool: x}\n")
    assert watched.refresh() is True and [s.pool_key for s in watched.servers] == ["default", "x"]
    path.write_text("servers: nope\n")
    assert watched.refresh() is False and "must be a list" in watched.last_error
    assert len(watched.servers) == 2  # the broken file keeps the previous list


@pytest.mark.parametrize("entries, message", [
    pytest.param([{"address": "nohost"}], "address must be 'host:port'", id="bad-address"),
    pytest.param([{"address": "h:1", "port": 2}], "unknown key 'port'", id="unknown-key"),
    pytest.param([{"address": "h:1"}, {"address": "h:1"}], "duplicate server id 'h:1'", id="duplicate"),
])
def test_server_entry_errors(entries, message):
    with pytest.raises(ConfigError, match=message):
        parse_servers(entries)


def test_scraper_reads_live_metrics_endpoints():
    async def scenario():
        async def metrics(request):
            return web.Response(text="# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 4\n"
                                     "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.25\n")
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        pool = PoolState((ServerSpec("up", f"127.0.0.1:{port}"), ServerSpec("down", "127.0.0.1:1")))
        scraper = MetricsScraper(pool, interval_s=0.01, timeout_s=1.0)
        stop = asyncio.Event()
        task = asyncio.create_task(scraper.run(stop))
        for _ in range(200):
            if scraper.rounds >= 2:
                break
            await asyncio.sleep(0.01)
        stop.set()
        await task
        await runner.cleanup()
        return pool
    pool = asyncio.run(scenario())
    assert pool.scrapes["up"].metrics == ServerMetrics(0.25, 4, 0)
    assert pool.scrapes["down"].metrics is None and "127.0.0.1:1" in pool.scrapes["down"].error


def test_snapshots_are_values_and_carry_prefix_on_a_partial_healthy_set():
    pool = PoolState((ServerSpec("a", "h:1"), ServerSpec("b", "h:2"), ServerSpec("c", "h:3")), unhealthy_after_s=5)
    for sid, at in (("a", 0.0), ("b", 9.0), ("c", 9.5)):
        pool.scraped(sid, ServerMetrics(0.5, 1, 1), now=at)
    hashes = block_hashes(list(range(64)))
    pool.dispatched(req(request_id="r1", prompt_tokens=64, block_hashes=hashes), "c", now=9.5)
    table = pool.snapshots(req(prompt_tokens=128, block_hashes=hashes), now=10.0)  # "a" is unhealthy
    assert table.server_id == ("b", "c") and table.state["prefix_match"].tolist() == [0.0, 0.5]
    assert table.metrics_age_s.tolist() == [1.0, 0.5] and table.state["inflight_requests"].tolist() == [0.0, 1.0]
    pool.completed("r1")
    pool.scraped("b", ServerMetrics(0.9, 7, 7), now=10.0)
    assert (table[1].inflight_requests, table[0].num_waiting) == (1, 1)  # taken before: unchanged
    again = pool.snapshots(req(), now=10.0)
    assert (again[1].inflight_requests, again[0].num_waiting, again[1].prefix_match) == (0, 7, 0.0)


def test_decode_tokens_in_flight_and_the_encoder_cache_the_router_measures():
    pool = PoolState((ServerSpec("a", "h:1"), ServerSpec("b", "h:2")))
    for server_id in "ab":
        pool.scraped(server_id, ServerMetrics(0.1, 0, 0), now=0.0)
    pool.dispatched(req(request_id="r1", max_tokens=300, media_hashes=(7, 8)), "a", now=0.0)
    pool.dispatched(req(request_id="r2", max_tokens=50, media_hashes=(9,)), "a", now=0.0)
    table = pool.snapshots(req(request_id="r3", media_hashes=(8, 9, 10)), now=0.1)
    assert table.state["inflight_decode_tokens"].tolist() == [350, 0]
    assert table.state["encoder_matched_size"].tolist() == [2, 0]
    pool.completed("r1")
    assert pool.snapshots(req(), now=0.2).state["inflight_decode_tokens"].tolist() == [50, 0]
    pool.set_servers((ServerSpec("b", "h:2"),))
    assert pool.encoder.matched((8, 9), ["a"]).tolist() == [0]  # a server that left is forgotten


def test_tokens_relayed_together_count_each():
    def at_risk_after(reads):
        pool = PoolState((ServerSpec("a", "h:1"),))
        pool.scraped("a", ServerMetrics(0, 0, 0), now=0.0)
        pool.dispatched(req(request_id="s", stream=True, slo_tpot_ms=50.0), "a", now=0.0)
        for t, count in reads:
            pool.token("s", t, count)
        return pool.snapshots(req(), 0.45)[0].tpot_at_risk

    together = at_risk_after([(0.10, 3), (0.16, 3)])  # two reads of three SSE events each
    assert together == at_risk_after([(0.10, 1)] * 3 + [(0.16, 1)] * 3) == 1.0  # 6 tokens: 50 ms behind at 0.45
    assert at_risk_after([(0.10, 1), (0.16, 1)]) == 0.0  # counted per read, 2 tokens: 250 ms behind, past saving


def test_a_streams_first_tokens_after_its_first_are_timed_once():
    pool = PoolState((ServerSpec("a", "h:1"),))
    pool.scraped("a", ServerMetrics(0, 0, 0), now=0.0)
    pool.dispatched(req(request_id="s", stream=True), "a", now=0.0)
    assert pool.token("s", 0.5).first is not None
    reads = [pool.token("s", 0.5 + 0.02 * i, 2).early_tpot_ms for i in range(1, EARLY_TPOT_TOKENS + 1)]
    timed = [(i, ms) for i, ms in enumerate(reads, 1) if ms is not None]
    assert timed == [(EARLY_TPOT_TOKENS // 2, pytest.approx(10.0))]  # two tokens a read, 20 ms apart
    assert pool.completed("s") == (False, True)
    assert pool.token("s", 9.0) == (None, None)  # a finished stream is forgotten
    pool.dispatched(req(request_id="t", stream=True), "a", now=0.0)
    pool.token("t", 0.5)
    assert pool.completed("t") == (False, False)  # not timed: its TPOT is learned at its end
    assert pool.completed("unknown") == (True, False)
