"""No request distorts routing: each attack on a request surface, against a real router (HTTP proxy,
Pick API, ext_proc) in front of real model servers."""

from __future__ import annotations

import asyncio
import io

import aiohttp
import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep

from headroom.router.proto import router_pb2, router_pb2_grpc
from tests.router.routercases import OPEN_TELEMETRY, TablePredictor, in_flight, wait_for
from tests.router.test_ext_proc import BUFFERED, exchange, header_map
from tests.router.test_pick_api import candidates
from tests.router.test_proxy_e2e import run, started
from tests.router.upstream import Upstream, upstreams


async def post(http: aiohttp.ClientSession, url: str, **kwargs) -> tuple[int, dict | str]:
    """The status and the body: JSON, or the text of an event stream."""
    async with http.post(url, **kwargs) as response:
        if response.content_type == "text/event-stream":
            return response.status, await response.text()
        return response.status, await response.json(content_type=None)


def test_a_malformed_stream_options_is_a_400_and_never_holds_a_server_in_flight():
    async def scenario():
        async with upstreams(Upstream("a"), Upstream("b")) as servers:
            router = await started(servers)
            url = f"http://127.0.0.1:{router.http_port}/v1/completions"
            async with aiohttp.ClientSession() as http:
                answers = await asyncio.gather(*(
                    post(http, url, json={"prompt": "x", "max_tokens": 2, "stream": True, "stream_options": bad})
                    for bad in ["x", [1], 1, {"include_usage": "yes"}] * 50))
                loads = in_flight(router)
                honest = await post(http, url, json={"prompt": "x", "max_tokens": 2})
            await router.stop()
            return answers, loads, honest, router
    answers, loads, honest, router = run(scenario)
    assert {status for status, _ in answers} == {400}
    assert all("stream_options" in body["error"]["message"] for _, body in answers)
    assert loads == (0, 0) and len(router.pool.inflight) == 0 and honest[0] == 200


def test_oversized_deep_and_overlong_inputs_are_refused_naming_their_limit():
    async def scenario():
        async with upstreams(Upstream("a")) as servers:
            router = await started(servers)
            url = f"http://127.0.0.1:{router.http_port}/v1/completions"
            async with aiohttp.ClientSession() as http:
                huge = await post(http, url, data=io.BytesIO(b'{"prompt": "' + b"x" * (50 * 1024 * 1024) + b'"}'))
                deep = await post(http, url, data=b"[" * 100_000 + b"]" * 100_000)
                many_ids = await post(http, url, json={"prompt": "x", "headroom": {"hash_ids": list(range(100_000))}})
                honest = await post(http, url, json={"prompt": "x" * 500_000, "max_tokens": 1})
            async with grpc.aio.insecure_channel(f"127.0.0.1:{router.pick_port}") as channel:
                stub = router_pb2_grpc.RouterStub(channel)
                picks = {}
                for name, request in {
                    "candidates": router_pb2.PickRequest(request_id="c", prompt_tokens=5, candidates=[
                        router_pb2.ServerState(server_id=f"s{i}", address=f"10.0.{i // 250}.{i % 250}:80")
                        for i in range(1000)]),
                    "block-hashes": router_pb2.PickRequest(request_id="h", prompt_tokens=5,
                                                           block_hashes=range(100_000)),
                    "deep-body": router_pb2.PickRequest(request_id="d", body=b"[" * 100_000 + b"]" * 100_000),
                }.items():
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        await stub.Pick(request)
                    picks[name] = caught.value
            replies = await exchange(router, [  # a buffered body is whole in its one message
                ep.ProcessingRequest(protocol_config=BUFFERED, request_headers=ep.HttpHeaders(
                    headers=header_map({":method": "POST", ":path": "/v1/completions"}))),
                ep.ProcessingRequest(request_body=ep.HttpBody(body=b"x" * (3 * 512 * 1024), end_of_stream=True))])
            await router.stop()
            return huge, deep, many_ids, honest, picks, replies, router
    huge, deep, many_ids, honest, picks, replies, router = run(scenario)
    assert huge[0] == 413 and "max_body_bytes" in huge[1]["error"]["message"]
    assert deep[0] == 400 and "max_json_depth" in deep[1]["error"]["message"]
    assert many_ids[0] == 400 and "max_block_hashes" in many_ids[1]["error"]["message"]
    assert honest[0] == 200  # a prompt of half a megabyte is fine: only its first tokens are hashed
    for name, limit in (("candidates", "max_candidates"), ("block-hashes", "max_block_hashes"),
                        ("deep-body", "max_json_depth")):
        assert picks[name].code() == grpc.StatusCode.INVALID_ARGUMENT and limit in picks[name].details(), name
    assert len(replies) == 2 and replies[-1].immediate_response.status.code == 413  # refused before parsing
    assert "max_body_bytes" in replies[-1].immediate_response.body.decode()
    assert len(router.pool.inflight) == 0


def test_pick_candidates_with_bad_slos_duplicate_ids_or_no_address_are_refused():
    def candidate(**fields):
        return router_pb2.ServerState(**{"server_id": "a", "address": "10.0.0.1:80", **fields})

    async def scenario():
        async with upstreams(Upstream("a")) as servers:
            router = await started(servers)
            errors = {}
            async with grpc.aio.insecure_channel(f"127.0.0.1:{router.pick_port}") as channel:
                stub = router_pb2_grpc.RouterStub(channel)
                for name, states in {
                    "nan-slo": [candidate(running_tpot_slos_ms=[float("nan")])],
                    "negative-slo": [candidate(running_tpot_slos_ms=[20.0, -5.0])],
                    "infinite-slo": [candidate(running_tpot_slos_ms=[float("inf")])],
                    "duplicate-id": [candidate(), candidate(address="10.0.0.2:80")],
                    "no-address": [candidate(address="")],
                }.items():
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        await stub.Pick(router_pb2.PickRequest(request_id=name, prompt_tokens=5, candidates=states))
                    errors[name] = caught.value
            await router.stop()
            return errors
    errors = run(scenario)
    assert {e.code() for e in errors.values()} == {grpc.StatusCode.INVALID_ARGUMENT}
    assert "running_tpot_slos_ms" in errors["nan-slo"].details() and "-5.0" in errors["negative-slo"].details()
    assert "appears more than once" in errors["duplicate-id"].details()
    assert "needs an address" in errors["no-address"].details()


def test_an_underscored_priority_is_refused_and_a_reused_request_id_keeps_each_dispatch_in_flight():
    async def scenario():
        async with upstreams(Upstream("a", first_token_delay_s=2.0), Upstream("b", first_token_delay_s=2.0)) \
                as servers:
            router = await started(servers)
            url = f"http://127.0.0.1:{router.http_port}/v1/completions"
            async with aiohttp.ClientSession() as http:
                underscored = await post(http, url, json={"prompt": "x"}, headers={"x-request-priority": "1_0"})
                same_id = [asyncio.create_task(post(http, url, json={"prompt": "x", "max_tokens": 2, "stream": True},
                                                    headers={"x-request-id": "shared"})) for _ in range(6)]
                await wait_for(lambda: in_flight(router)[0] == 6, timeout_s=1.5)  # before any first token
                during = in_flight(router)[0]
                await asyncio.gather(*same_id)
            await router.stop()
            return underscored, during, router
    underscored, during, router = run(scenario)
    assert underscored[0] == 400 and "decimal integer" in underscored[1]["error"]["message"]
    assert during == 6 and len(router.pool.inflight) == 0


def test_a_report_of_an_implausible_latency_is_refused_and_records_nothing():
    async def scenario():
        async with upstreams(Upstream("a")) as servers:
            router = await started(servers, predictor=TablePredictor(), environ=OPEN_TELEMETRY)
            try:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{router.pick_port}") as channel:
                    stub = router_pb2_grpc.RouterStub(channel)
                    await stub.Pick(router_pb2.PickRequest(request_id="far", prompt_tokens=5, candidates=candidates(0)))
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        await stub.Report(router_pb2.ReportRequest(request_id="far", e2e_ms=1e300, output_tokens=3))
                    await stub.Pick(router_pb2.PickRequest(request_id="near", prompt_tokens=5, candidates=candidates(0)))
                    fine = await stub.Report(router_pb2.ReportRequest(request_id="near", e2e_ms=900, output_tokens=3))
            finally:
                await router.stop()
            return caught.value, fine, router
    refused, fine, router = run(scenario)
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT and "'e2e_ms' is a latency" in refused.details()
    assert fine.telemetry_sent and [r.request_id for r in router.telemetry.records] == ["near"]
    assert len(router.pool.inflight) == 0
