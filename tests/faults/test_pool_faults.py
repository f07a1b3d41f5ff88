"""Faults in the pool do not reach clients, and nothing goes unaccounted: failing, dead and hanging model
servers behind a real router, telemetry with the broker down and up, headers across the proxy."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import aiohttp
import pytest

from headroom.contract.topics import KafkaSettings
from headroom.router.app.server import RouterServer
from tests.conftest import free_port
from tests.faults.test_request_faults import post
from tests.router.routercases import router_config, wait_for
from tests.router.test_proxy_e2e import run, started
from tests.router.upstream import Upstream, upstreams
from tests.streams.test_pipeline_kafka import read_topic


def metric(router: RouterServer, sample: str) -> float:
    for line in router.metrics.exposition().decode().splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_failing_and_a_dead_server_are_ejected_and_their_failures_never_reach_clients():
    async def scenario():
        pool = [Upstream("a", waiting=3, running=8, kv=0.6), Upstream("b", waiting=3, running=8, kv=0.6),
                Upstream("failing", kv=0.0, fail_status=500), Upstream("dead", kv=0.0)]
        async with upstreams(*pool) as servers:
            router = await started(servers)
            await servers[3].stop()  # it dies; the router scraped it a moment ago and still believes in it
            url = f"http://127.0.0.1:{router.http_port}/v1/completions"
            async with aiohttp.ClientSession() as http:
                answers = [await post(http, url, json={"prompt": "x", "max_tokens": 2}) for _ in range(40)]
                async with http.get(f"http://127.0.0.1:{router.http_port}/healthz") as response:
                    health = await response.json()
            await router.stop()
            return answers, health, router
    answers, health, router = run(scenario)
    assert [status for status, _ in answers] == [200] * 40
    assert set(health["ejected"]) == {"s2", "s3"} and health["inflight"] == 0
    assert metric(router, 'headroom_router_upstream_ejections_total{server="s2"}') == 1
    assert metric(router, 'headroom_router_upstream_ejections_total{server="s3"}') == 1
    assert metric(router, 'headroom_router_upstream_failures_total{reason="status-500"}') >= 1
    assert metric(router, 'headroom_router_upstream_failures_total{reason="connect"}') >= 1
    records = router.telemetry.records
    assert len(records) == 40 and {r.server_id for r in records} <= {"s0", "s1"}
    assert sum(r.retries for r in records) == metric(router, "headroom_router_upstream_retries_total") >= 2
    assert sum(r.ejections for r in records) == 2


def test_a_hanging_server_costs_one_first_byte_timeout_and_the_request_goes_elsewhere():
    async def scenario():
        async with upstreams(Upstream("a", waiting=2, running=8, kv=0.5), Upstream("hanging", kv=0.0, hang=True)) \
                as servers:
            router = await started(servers, upstreamFirstByteTimeoutS=0.5, outlierFailures=2)
            url = f"http://127.0.0.1:{router.http_port}/v1/chat/completions"
            async with aiohttp.ClientSession() as http:
                answers = await asyncio.gather(*(post(http, url, json={
                    "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": stream})
                    for stream in (True, False) * 5))
            await router.stop()
            return answers, router
    answers, router = run(scenario)
    assert [status for status, _ in answers] == [200] * 10
    assert metric(router, 'headroom_router_upstream_failures_total{reason="first-byte-timeout"}') >= 1
    assert {r.server_id for r in router.telemetry.records} == {"s0"} and len(router.pool.inflight) == 0


@pytest.mark.kafka
def test_telemetry_counts_a_record_when_the_broker_acknowledges_it_and_logs_what_it_drops(kafka, caplog):
    down = dataclasses.replace(kafka, bootstrap_servers=f"127.0.0.1:{free_port()}")  # nothing listens there

    async def scenario(broker: KafkaSettings, requests: int):
        async with upstreams(Upstream("a")) as servers:
            router = RouterServer(router_config([servers[0].address], telemetry=True, telemetryBuffer=50), broker)
            await router.start()
            assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
            url = f"http://127.0.0.1:{router.http_port}/v1/completions"
            async with aiohttp.ClientSession() as http:
                statuses = [(await post(http, url, json={"prompt": "x", "max_tokens": 1}))[0] for _ in range(requests)]
            await router.stop(flush_s=10.0 if broker is kafka else 0.5)
            return statuses, router

    with caplog.at_level(logging.WARNING, logger="headroom.router.control.telemetry_sink"):
        statuses, lost = run(lambda: scenario(down, 200))
    assert statuses == [200] * 200
    assert metric(lost, 'headroom_router_telemetry_delivery_total{outcome="delivered"}') == 0
    assert metric(lost, 'headroom_router_telemetry_delivery_total{outcome="dropped"}') == 150
    assert 'outcome="sent"' not in lost.metrics.exposition().decode()  # nothing claims a record it never delivered
    assert any("telemetry record dropped" in r.getMessage() for r in caplog.records)
    assert len([r for r in caplog.records if "telemetry record dropped" in r.getMessage()]) < 10  # rate-limited

    before = len(read_topic(kafka, kafka.telemetry_topic))
    statuses, kept = run(lambda: scenario(kafka, 20))
    assert metric(kept, 'headroom_router_telemetry_delivery_total{outcome="delivered"}') == 20
    assert len(read_topic(kafka, kafka.telemetry_topic)) - before == 20


def test_hop_by_hop_headers_stay_on_their_connection_and_the_servers_headers_reach_the_client():
    async def scenario():
        server = Upstream("a", response_headers={"x-request-id": "upstream-7", "x-ratelimit-remaining-requests": "41",
                                                 "Connection": "x-internal", "x-internal": "secret"})
        async with upstreams(server) as servers:
            router = await started(servers)
            url = f"http://127.0.0.1:{router.http_port}/v1/completions"
            sent = {"Connection": "keep-alive, x-hop", "x-hop": "1", "TE": "trailers", "Upgrade": "h2c",
                    "Proxy-Authorization": "Basic cHJveHk6cGFzcw==", "Keep-Alive": "timeout=5",
                    "X-Forwarded-For": "203.0.113.9", "Authorization": "Bearer end-to-end"}
            async with aiohttp.ClientSession() as http, http.post(url, json={"prompt": "x", "max_tokens": 1},
                                                                headers=sent) as response:
                status, relayed = response.status, response.headers.copy()
            await router.stop()
            return status, servers[0].received[0][1], relayed
    status, received, relayed = run(scenario)
    assert status == 200
    for hop in ("x-hop", "TE", "Upgrade", "Proxy-Authorization", "Keep-Alive", "Trailer", "Transfer-Encoding"):
        assert hop not in received, hop
    assert "keep-alive" not in received.get("Connection", "").lower()
    assert received["X-Forwarded-For"] == "203.0.113.9, 127.0.0.1"
    assert received["Authorization"] == "Bearer end-to-end"
    assert relayed["x-request-id"] == "upstream-7" and relayed["x-ratelimit-remaining-requests"] == "41"
    assert "x-internal" not in relayed and relayed["x-headroom-server"] == "s0"


pytestmark = pytest.mark.timeout(120)
