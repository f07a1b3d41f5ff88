"""Failures that must not look like successes, against the real router process (``headroom router serve``) over
real aiohttp model servers: a cut stream ends with an error event, a cut JSON answer is a 502, both counted as the
server's failures; a hanging server is ejected on its first-byte timeouts while a busy one is waited for and a pool
slow as a whole is not ejected; a
connection over the limit is refused, an idle one cut; a Pick body that is not JSON and an empty ext_proc message
get ``INVALID_ARGUMENT``."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc
import pytest
import yaml

from tests.conftest import free_port
from tests.router.test_proxy_e2e import run
from tests.router.upstream import Upstream, upstreams

pytestmark = pytest.mark.e2e
SLO = {"x-slo-ttft-ms": "100"}


@dataclass
class RouterProcess:
    http_port: int
    pick_port: int
    ext_proc_port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    async def metric(self, http: aiohttp.ClientSession, line: str) -> float:
        async with http.get(f"{self.url}/metrics") as response:
            text = await response.text()
        return next((float(s.split()[-1]) for s in text.splitlines() if s.startswith(line + " ")), 0.0)

    async def healthz(self, http: aiohttp.ClientSession) -> dict:
        async with http.get(f"{self.url}/healthz") as response:
            return await response.json()


@asynccontextmanager
async def router_process(folder: Path, servers, **settings):
    """``headroom router serve`` over ``servers`` (heuristic profile, no telemetry, plaintext ext_proc)."""
    ports = {"httpPort": free_port(), "pickPort": free_port(), "extProcPort": free_port()}
    config = {"settings": {**ports, "telemetry": False, "predictor": "none", "extProcSecure": False, "seed": 1,
                           **settings},
              "servers": [{"id": f"s{i}", "address": s.address} for i, s in enumerate(servers)]}
    path, log = folder / "router.yaml", folder / "router.log"
    path.write_text(yaml.safe_dump(config))
    with open(log, "wb") as out:
        process = await asyncio.create_subprocess_exec(sys.executable, "-m", "headroom.cli.main", "router", "serve",
                                                       "--config", str(path), stdout=out, stderr=out)
    router = RouterProcess(ports["httpPort"], ports["pickPort"], ports["extProcPort"], log)
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(300):
                assert process.returncode is None, log.read_text()
                try:
                    if (await router.healthz(http))["servers"] == len(servers):
                        break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.3)  # a scrape of every server
        yield router
    finally:
        if process.returncode is None:
            process.terminate()
        await process.wait()


async def post(http, router, body, headers=None):
    async with http.post(f"{router.url}/v1/completions", json=body, headers=headers or {}) as response:
        return response.status, (await response.read()).decode()


def test_a_stream_whose_server_dies_or_falls_silent_ends_with_an_error_event_counted_as_the_servers(tmp_path):
    async def scenario():
        async with upstreams(Upstream("dies", die_after=2)) as dying, upstreams(Upstream("silent", stall_after=2)) \
                as silent:
            answers = []
            for servers in (dying, silent):
                async with router_process(tmp_path, servers, upstreamIdleTimeoutS=0.5) as router, \
                        aiohttp.ClientSession() as http:
                    status, text = await post(http, router, {"prompt": "x", "max_tokens": 8, "stream": True})
                    failures = {reason: await router.metric(
                        http, f'headroom_router_upstream_failures_total{{reason="{reason}"}}')
                        for reason in ("stream-broken", "idle-timeout")}
                    answers.append((status, text, failures, (await router.healthz(http))["inflight"]))
            return answers
    for (status, text, failures, inflight), reason in zip(run(scenario), ("stream-broken", "idle-timeout"),
                                                          strict=True):
        events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        assert status == 200 and "[DONE]" not in events and len(events) == 3  # two chunks, then the error
        error = json.loads(events[-1])["error"]
        assert error["code"] == "upstream_stream_broken" and error["type"] == "server_error" and reason in \
            error["message"]
        assert failures[reason] == 1 and sum(failures.values()) == 1 and inflight == 0


def test_a_200_whose_json_was_cut_short_is_a_502_counted_as_the_servers_failure(tmp_path):
    async def scenario():
        async with upstreams(Upstream("cut", truncated_json=True)) as servers, \
                router_process(tmp_path, servers, upstreamRetries=0) as router, aiohttp.ClientSession() as http:
            status, text = await post(http, router, {"prompt": "x", "max_tokens": 4})
            failures = await router.metric(http, 'headroom_router_upstream_failures_total{reason="body-truncated"}')
            return status, json.loads(text), failures
    status, body, failures = run(scenario)
    assert status == 502 and body["error"]["code"] == "upstream_error" and "not whole JSON" in body["error"]["message"]
    assert failures == 1


def test_a_hanging_server_is_ejected_on_first_byte_timeouts_derived_from_the_slo(tmp_path):
    async def scenario():  # a 100 ms SLO: a first-byte limit of 4 x 0.1 s, not the 120 s that clients outwait
        async with upstreams(Upstream("hangs", hang=True), Upstream("b"), Upstream("c")) as servers, \
                router_process(tmp_path, servers, upstreamFirstByteMinS=0.1, outlierFailures=2) as router, \
                aiohttp.ClientSession() as http:
            statuses = []
            while len(statuses) < 40 and not (await router.healthz(http))["ejected"]:
                statuses.append((await post(http, router, {"prompt": f"p{len(statuses)}", "max_tokens": 2}, SLO))[0])
            timeouts = await router.metric(http, 'headroom_router_upstream_failures_total{reason="first-byte-timeout"}')
            return statuses, timeouts, (await router.healthz(http))["ejected"], [len(s.received) for s in servers]
    statuses, timeouts, ejected, received = run(scenario)
    assert set(statuses) == {200}  # each timed-out attempt went on to another server
    assert list(ejected) == ["s0"] and timeouts == received[0] == 2


def test_a_busy_server_past_the_first_byte_limit_is_waited_for_not_cut(tmp_path):
    async def scenario():  # headers 1 s late, past a 0.4 s limit, while the server streams another request's tokens
        async with upstreams(Upstream("busy", head_delay_s=1.0, token_delay_s=0.05)) as servers, \
                router_process(tmp_path, servers, upstreamFirstByteMinS=0.1, upstreamRetries=0) as router, \
                aiohttp.ClientSession() as http:
            first = asyncio.create_task(post(http, router, {"prompt": "long", "max_tokens": 60, "stream": True}))
            await asyncio.sleep(1.5)  # its tokens are flowing now (it carries no SLO: no derived limit of its own)
            second = await post(http, router, {"prompt": "late", "max_tokens": 2, "stream": True}, SLO)
            timeouts = await router.metric(http, 'headroom_router_upstream_failures_total{reason="first-byte-timeout"}')
            return (await first)[0], second[0], timeouts
    first, second, timeouts = run(scenario)
    assert (first, second, timeouts) == (200, 200, 0)


def test_a_pool_slow_as_a_whole_ejects_no_server(tmp_path):
    async def scenario():  # every server answers after 0.6 s, past the 0.4 s limit: the host, not one server
        async with upstreams(*(Upstream(name, token_delay_s=0.3) for name in "abc")) as servers, \
                router_process(tmp_path, servers, upstreamFirstByteMinS=0.1, outlierFailures=2) as router, \
                aiohttp.ClientSession() as http:
            statuses = [(await post(http, router, {"prompt": f"p{i}", "max_tokens": 2}, SLO))[0] for i in range(4)]
            timeouts = await router.metric(http, 'headroom_router_upstream_failures_total{reason="first-byte-timeout"}')
            return statuses, timeouts, (await router.healthz(http))["ejected"]
    statuses, timeouts, ejected = run(scenario)
    assert statuses == [504] * 4 and timeouts == 12 and ejected == {}


def test_a_connection_over_the_limit_is_refused_and_an_idle_one_is_cut(tmp_path, ext_proc_front):
    async def scenario():
        async with upstreams(Upstream("a")) as servers, \
                router_process(tmp_path, servers, maxConnections=3, requestArrivalS=0.5, keepAliveS=1.0,
                               extProcFront=ext_proc_front) as router:
            held = [await asyncio.open_connection("127.0.0.1", router.http_port) for _ in range(3)]
            reader, writer = await asyncio.open_connection("127.0.0.1", router.http_port)
            refusal = await asyncio.wait_for(reader.read(), 5)  # answered and closed at once
            cut = [await asyncio.wait_for(r.read(), 5) for r, _ in held]  # the router closes the idle ones
            for _, each in [*held, (reader, writer)]:
                each.close()
            grpc_socks = [socket.create_connection(("127.0.0.1", router.ext_proc_port)) for _ in range(4)]
            for sock in grpc_socks:
                sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(9)[:3] + b"\x04" + bytes(5))
            await asyncio.sleep(0.5)
            over = await asyncio.to_thread(_read_all, grpc_socks[3], 2.0)
            idle = await asyncio.to_thread(_read_all, grpc_socks[0], 3.0)
            for sock in grpc_socks:
                sock.close()
            async with aiohttp.ClientSession() as http:
                refused = await router.metric(http, 'headroom_router_connections_refused_total{listener="http"}')
            return refusal, cut, over, idle, refused
    refusal, cut, over, idle, refused = run(scenario)
    head, _, body = refusal.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503") and json.loads(body)["error"]["code"] == "too_many_connections"
    assert b"maxConnections" in body and refused == 1
    assert cut == [b"", b"", b""]
    assert over == b""  # gRPC: the connection over the limit closed before any frame
    assert GOAWAY in frame_types(idle)  # after keepAliveS without a call


GOAWAY = 7


def frame_types(data: bytes) -> list[int]:
    """The types of the HTTP/2 frames in ``data``, as a server sends them."""
    types = []
    while len(data) >= 9:
        length = int.from_bytes(data[:3], "big")
        types.append(data[3])
        data = data[9 + length:]
    return types


def _read_all(sock: socket.socket, seconds: float) -> bytes:
    """What the server sends before it closes the connection (or ``seconds`` pass)."""
    sock.settimeout(seconds)
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except TimeoutError:
        pass
    return data


def test_a_pick_body_that_is_not_json_and_an_empty_ext_proc_message_are_invalid_arguments(tmp_path, ext_proc_front):
    from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

    from headroom.router.proto import router_pb2, router_pb2_grpc

    async def scenario():
        async with upstreams(Upstream("a")) as servers, \
                router_process(tmp_path, servers, extProcFront=ext_proc_front) as router:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{router.pick_port}") as channel:
                try:
                    await router_pb2_grpc.RouterStub(channel).Pick(router_pb2.PickRequest(
                        request_id="r1", body=b"{not json"))
                except grpc.aio.AioRpcError as err:
                    pick = err.code(), err.details()
            async with grpc.aio.insecure_channel(f"127.0.0.1:{router.ext_proc_port}") as channel:
                call = ep_grpc.ExternalProcessorStub(channel).Process()
                await call.write(ep.ProcessingRequest())
                ext_proc = await call.code(), await call.details()
            return pick, ext_proc
    (pick_code, pick_details), (ext_proc_code, ext_proc_details) = run(scenario)
    assert pick_code == grpc.StatusCode.INVALID_ARGUMENT and "not valid JSON" in pick_details
    assert ext_proc_code == grpc.StatusCode.INVALID_ARGUMENT and "must carry one of request_headers" in ext_proc_details
