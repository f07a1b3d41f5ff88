"""The proxy when model servers fail: a stream that falls silent, every server failing, an oversized failure
body, a server that never lists its models. Real aiohttp model servers, the real router, a real client."""

import contextlib
import time

import aiohttp

from headroom.router.fronts.proxy import MODELS_TIMEOUT_S
from headroom.router.fronts.upstreams import MAX_ERROR_BODY
from tests.router.routercases import in_flight, wait_for
from tests.router.test_proxy_e2e import run, started
from tests.router.upstream import Upstream, upstreams


def metric(router, line: str) -> float:
    for sample in router.metrics.exposition().decode().splitlines():
        if sample.startswith(line + " "):
            return float(sample.split()[-1])
    return 0.0


def test_a_stream_that_falls_silent_ends_after_the_idle_timeout_and_releases_its_server():
    async def scenario():
        async with upstreams(Upstream("a", stall_after=3)) as servers:
            router = await started(servers, upstreamIdleTimeoutS=0.3)
            async with aiohttp.ClientSession() as http:
                async with http.post(f"http://127.0.0.1:{router.http_port}/v1/completions",
                                     json={"prompt": "x", "max_tokens": 8, "stream": True}) as response:
                    status = response.status
                    try:
                        text = (await response.read()).decode()
                    except aiohttp.ClientPayloadError as err:  # a stream cut short may also end this way
                        text = repr(err)
                released = await wait_for(lambda: in_flight(router) == (0, 0))
            await router.stop()
            return status, text, released, router
    status, text, released, router = run(scenario)
    assert status == 200 and released and len(router.pool.inflight) == 0
    assert "[DONE]" not in text
    assert metric(router, 'headroom_router_upstream_failures_total{reason="idle-timeout"}') == 1


def test_the_total_timeout_counts_from_the_requests_start_not_from_the_streams_headers():
    async def scenario():  # headers at 0.6 s, then silence: the total limit (1 s) ends it before the idle one (1.3 s)
        async with upstreams(Upstream("a", head_delay_s=0.6, stall_after=0)) as servers:
            router = await started(servers, upstreamTimeoutS=1.0, upstreamIdleTimeoutS=0.7,
                                   upstreamFirstByteTimeoutS=2.0)
            async with aiohttp.ClientSession() as http:
                async with http.post(f"http://127.0.0.1:{router.http_port}/v1/completions",
                                     json={"prompt": "x", "max_tokens": 8, "stream": True}) as response:
                    with contextlib.suppress(aiohttp.ClientPayloadError):
                        await response.read()
            await router.stop()
            return router
    router = run(scenario)
    assert metric(router, 'headroom_router_upstream_failures_total{reason="total-timeout"}') == 1
    assert metric(router, 'headroom_router_upstream_failures_total{reason="idle-timeout"}') == 0


def test_when_every_server_fails_the_last_failure_is_the_answer():
    async def scenario():
        failing = [Upstream(name, fail_status=503) for name in "abc"]
        async with upstreams(*failing) as servers:
            router = await started(servers, upstreamRetries=2)
            async with aiohttp.ClientSession() as http:
                async with http.post(f"http://127.0.0.1:{router.http_port}/v1/completions",
                                     json={"prompt": "x", "max_tokens": 2}) as response:
                    relayed = response.status, await response.json(), response.headers.get("x-headroom-server")
                for s in servers:
                    await s.stop()
                async with http.post(f"http://127.0.0.1:{router.http_port}/v1/completions",
                                     json={"prompt": "x", "max_tokens": 2}) as response:
                    refused = response.status, await response.json()
            await router.stop()
            return relayed, refused, [len(s.received) for s in servers], router
    (status, body, server), (refused_status, refused_body), received, router = run(scenario)
    assert status == 503 and body == {"error": {"message": "engine dead"}}  # the server's own failure
    assert received == [1, 1, 1] and server in {"s0", "s1", "s2"}  # the first try and two retries
    assert refused_status == 502 and refused_body["error"]["code"] == "upstream_unreachable"
    assert refused_body["error"]["type"] == "server_error" and "connect" in refused_body["error"]["message"]
    assert len(router.pool.inflight) == 0


def test_a_relayed_failure_body_is_cut_at_max_error_body():
    big = b'{"error": {"message": "' + b"x" * (3 * MAX_ERROR_BODY) + b'"}}'

    async def scenario():
        async with upstreams(Upstream("a", fail_status=500, fail_body=big)) as servers:
            router = await started(servers, upstreamRetries=0)
            async with aiohttp.ClientSession() as http:
                async with http.post(f"http://127.0.0.1:{router.http_port}/v1/completions",
                                     json={"prompt": "x", "max_tokens": 2}) as response:
                    answer = response.status, await response.read()
            await router.stop()
            return answer
    status, body = run(scenario)
    assert status == 500 and body == big[:MAX_ERROR_BODY]


def test_models_answers_without_a_server_that_never_lists_its_models():
    async def scenario():
        async with upstreams(Upstream("a", models=("llama",)), Upstream("b", hang_models=True)) as servers:
            router = await started(servers)
            async with aiohttp.ClientSession() as http:
                began = time.monotonic()
                async with http.get(f"http://127.0.0.1:{router.http_port}/v1/models") as response:
                    answer = response.status, await response.json(), time.monotonic() - began
            await router.stop()
            return answer
    status, body, took = run(scenario)
    assert status == 200 and [m["id"] for m in body["data"]] == ["llama"]
    assert took < 10 * MODELS_TIMEOUT_S  # bounded by the per-server limit, not by the hanging server
