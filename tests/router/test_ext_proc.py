"""The Envoy ext_proc server, driven by a client speaking the protocol as Envoy does — over TLS, which the
listener speaks by default with a self-signed certificate (the endpoint picker's convention)."""

import asyncio
import json

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

from headroom.contract.prompt import count_tokens
from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.app.server import RouterServer
from headroom.router.fronts.ext_proc import DESTINATION_HEADER, MAX_ROUTED_REPLIES, ExtProcServicer
from tests.router.routercases import GATEWAY_TOKEN, TablePredictor, gateway_environ, in_flight, router_config, wait_for
from tests.router.upstream import Upstream, upstreams

pytestmark = pytest.mark.usefixtures("ext_proc_front")  # each test with both fronts

MODES = processing_mode_pb2.ProcessingMode
BUFFERED = ep.ProtocolConfiguration(request_body_mode=MODES.BUFFERED, response_body_mode=MODES.STREAMED)


def header_map(headers):
    return base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in headers.items()])


def sse(*chunks):
    return [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]


def ext_proc_channel(router, token: str | None = GATEWAY_TOKEN) -> grpc.aio.Channel:
    """A channel to the router's ext_proc listener, trusting the certificate it serves, sending the gateway's
    ``token`` on every call as Envoy sends its ``initial_metadata``."""
    credentials = grpc.ssl_channel_credentials(root_certificates=router.ext_proc_certificate)
    if token is not None:
        credentials = grpc.composite_channel_credentials(credentials, grpc.access_token_call_credentials(token))
    return grpc.aio.secure_channel(f"127.0.0.1:{router.ext_proc_port}", credentials)


async def exchange(router, messages):
    """Send ``messages`` one at a time, as Envoy does, collecting each reply."""
    replies = []
    async with ext_proc_channel(router) as channel:
        call = ep_grpc.ExternalProcessorStub(channel).Process()
        for message in messages:
            await call.write(message)
            reply = await call.read()
            replies.append(reply)
            if reply.HasField("immediate_response"):
                break
        await call.done_writing()
    return replies


async def with_router(scenario, predictor=None, environ=None, **settings):
    """``scenario`` run against a router over two live servers, whose gateway authenticates with its token."""
    async with upstreams(Upstream("a", running=2, kv=0.3), Upstream("b", waiting=5, running=2, kv=0.5)) as servers:
        config = router_config([s.address for s in servers], environ={**gateway_environ(), **(environ or {})},
                               **settings)
        router = RouterServer(config, from_env(KafkaSettings, {}), predictor=predictor)
        await router.start()
        assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
        try:
            return await scenario(router, servers), router
        finally:
            await router.stop()


def request_messages(headers, body, config=BUFFERED):
    """Request headers (announcing the request body ``BUFFERED`` unless ``config`` is None), then the body."""
    return [ep.ProcessingRequest(protocol_config=config, request_headers=ep.HttpHeaders(headers=header_map(
                {":method": "POST", ":path": "/v1/completions", **headers}))),
            ep.ProcessingRequest(request_body=ep.HttpBody(body=json.dumps(body).encode(), end_of_stream=True))]


def test_routes_and_meters_a_streaming_response():
    async def scenario(router, servers):
        body = {"prompt": "hello world", "max_tokens": 4, "stream": True}
        response = [ep.ProcessingRequest(response_headers=ep.HttpHeaders(headers=header_map({":status": "200"})))]
        chunks = sse({"choices": [{"text": "ab"}]}, {"choices": [{"text": "cd"}]},
                     {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})
        for i, chunk in enumerate(chunks):
            response.append(ep.ProcessingRequest(response_body=ep.HttpBody(body=chunk, end_of_stream=i == len(chunks) - 1)))
        head = await exchange(router, request_messages(
            {"x-prediction-based-scheduling": "true", "x-request-id": "env-1"}, body) + response)
        return head, {s.address for s in servers}
    (replies, addresses), router = asyncio.run(asyncio.wait_for(with_router(scenario, TablePredictor()), 60))
    assert replies[0].HasField("request_headers")
    mutation = replies[1].request_body.response.header_mutation.set_headers
    (header,) = [h.header for h in mutation if h.header.key == DESTINATION_HEADER]
    assert header.raw_value.decode() in addresses
    assert replies[1].request_body.response.clear_route_cache
    assert replies[1].dynamic_metadata.fields["envoy.lb"].struct_value.fields[DESTINATION_HEADER].string_value == \
        header.raw_value.decode()
    assert [r.WhichOneof("response") for r in replies[2:]] == ["response_headers"] + ["response_body"] * 4
    (record,) = router.telemetry.records
    assert record.request_id == "env-1" and record.output_tokens == 4 and record.stream
    assert record.predicted_ttft_ms == 100.0 and record.tpot_ms is not None
    assert len(router.pool.inflight) == 0


def test_the_first_streamed_token_ends_the_prefill_accounting():
    async def scenario(router, servers):
        body = {"prompt": "hello world", "max_tokens": 4, "stream": True}
        first, rest = sse({"choices": [{"text": "ab"}]}, {"choices": [{"text": "cd"}]})[:1], sse()
        loads = []
        async with ext_proc_channel(router) as channel:
            call = ep_grpc.ExternalProcessorStub(channel).Process()
            for message in request_messages({"x-request-id": "env-2"}, body) + [
                    ep.ProcessingRequest(response_headers=ep.HttpHeaders(headers=header_map({":status": "200"})))]:
                await call.write(message)
                await call.read()
            loads.append(in_flight(router))
            for chunk, last in ((first[0], False), (rest[0], True)):
                await call.write(ep.ProcessingRequest(response_body=ep.HttpBody(body=chunk, end_of_stream=last)))
                await call.read()
                loads.append(in_flight(router))
            await call.done_writing()
        return loads
    (before, after_first, done), _ = asyncio.run(asyncio.wait_for(with_router(scenario), 60))
    assert before[0] == 1 and before[1] > 0
    assert after_first == (1, 0) and done == (0, 0)


def test_immediate_errors():
    async def scenario(router, servers):
        bad = await exchange(router, request_messages({"x-slo-ttft-ms": "soon"}, {"prompt": "x"}))
        shed = await exchange(router, request_messages(
            {"x-prediction-based-scheduling": "true", "x-slo-ttft-ms": "1", "x-request-priority": "-1"}, {"prompt": "x"}))
        return bad[-1].immediate_response, shed[-1].immediate_response
    (bad, shed), router = asyncio.run(asyncio.wait_for(with_router(scenario, TablePredictor()), 60))
    assert bad.status.code == 400 and "x-slo-ttft-ms" in json.loads(bad.body)["error"]["message"]
    assert shed.status.code == 429 and "priority -1" in json.loads(shed.body)["error"]["message"]
    assert [(json.loads(r.body)["error"]["type"], json.loads(r.body)["error"]["code"]) for r in (bad, shed)] == \
        [("invalid_request_error", "invalid_request"), ("requests", "admission_rejected")]


def test_stream_ending_early_releases_the_request():
    async def scenario(router, servers):
        await exchange(router, request_messages({}, {"prompt": "x"}))
        return await wait_for(lambda: len(router.pool.inflight) == 0)
    released, router = asyncio.run(asyncio.wait_for(with_router(scenario), 60))
    assert released
    assert 'headroom_router_request_errors_total{kind="ext-proc-stream-ended"} 1.0' in router.metrics.exposition().decode()


def test_a_large_body_in_chunks_is_parsed_whole_and_a_malformed_one_refused():
    prompt = "word " * 40_000  # 200 KB: parsed off the event loop
    raw = json.dumps({"prompt": prompt, "max_tokens": 4}).encode()
    duplex = ep.ProtocolConfiguration(request_body_mode=MODES.FULL_DUPLEX_STREAMED,
                                      response_body_mode=MODES.FULL_DUPLEX_STREAMED)  # a body in chunks
    headers = ep.ProcessingRequest(protocol_config=duplex, request_headers=ep.HttpHeaders(headers=header_map(
        {":method": "POST", ":path": "/v1/completions", "x-request-id": "large"})))

    async def send(router, body):
        """The body's chunks without waiting, as Envoy sends them; the first answer, and the prompt tokens in
        flight while the stream is open."""
        async with ext_proc_channel(router) as channel:
            call = ep_grpc.ExternalProcessorStub(channel).Process()
            for message in (headers, ep.ProcessingRequest(request_body=ep.HttpBody(body=body[:70_000])),
                            ep.ProcessingRequest(request_body=ep.HttpBody(body=body[70_000:], end_of_stream=True))):
                await call.write(message)
            first = await call.read()
            tokens = sum(load.prompt_tokens for load in router.pool.inflight.load().values())
            await call.done_writing()
        return first, tokens

    async def scenario(router, servers):
        return await send(router, raw), (await send(router, raw[:-1]))[0].immediate_response
    ((routed, tokens), refused), router = asyncio.run(asyncio.wait_for(with_router(scenario, TablePredictor()), 60))
    assert routed.request_headers.response.clear_route_cache and tokens == count_tokens(prompt)
    assert refused.status.code == 400 and json.loads(refused.body)["error"]["code"] == "invalid_request"


def test_routed_answers_are_built_once_per_address_and_never_shared_with_the_unchanged_ones():
    servicer = ExtProcServicer(service=None)
    first, second = servicer.routed("request_body", "10.0.0.1:8000"), servicer.routed("request_body", "10.0.0.2:8000")
    assert servicer.routed("request_body", "10.0.0.1:8000") is first
    for reply, address in ((first, "10.0.0.1:8000"), (second, "10.0.0.2:8000")):
        (header,) = reply.request_body.response.header_mutation.set_headers
        assert (header.header.key, header.header.raw_value.decode()) == (DESTINATION_HEADER, address)
        assert reply.dynamic_metadata.fields["envoy.lb"].struct_value.fields[DESTINATION_HEADER].string_value == address
    headers_only = servicer.routed("request_headers", "10.0.0.1:8000")
    assert headers_only.WhichOneof("response") == "request_headers" and headers_only.request_headers.response.clear_route_cache
    for i in range(MAX_ROUTED_REPLIES):
        servicer.routed("request_body", f"10.1.{i // 250}.{i % 250}:8000")
    assert len(servicer._routed) <= MAX_ROUTED_REPLIES


def test_a_request_without_a_body_is_routed_on_its_headers_and_the_next_stream_starts_unchanged():
    async def scenario(router, servers):
        bodiless = ep.ProcessingRequest(protocol_config=BUFFERED, request_headers=ep.HttpHeaders(headers=header_map(
            {":method": "GET", ":path": "/v1/completions", "x-request-id": "get-1"}), end_of_stream=True))
        routed = await exchange(router, [bodiless])
        following = await exchange(router, request_messages({}, {"prompt": "x"}))
        return routed[0], following[0], {s.address for s in servers}
    (routed, following, addresses), _ = asyncio.run(asyncio.wait_for(with_router(scenario), 60))
    (header,) = routed.request_headers.response.header_mutation.set_headers
    assert header.header.raw_value.decode() in addresses
    assert following.HasField("request_headers") and not following.request_headers.HasField("response")
