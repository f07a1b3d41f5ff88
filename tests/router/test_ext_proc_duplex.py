"""The Envoy ext_proc server in ``FULL_DUPLEX_STREAMED`` mode, the Gateway API Inference Extension's Envoy
configuration: driven over a real gRPC stream as Envoy does — every message sent without waiting for answers,
the answers read as they come — and, beside it, the buffered mode Envoy announces explicitly."""

import asyncio
import json

import grpc
import pytest
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.app.server import RouterServer
from headroom.router.fronts.ext_proc import DESTINATION_HEADER
from tests.router.routercases import TablePredictor, router_config
from tests.router.test_ext_proc import ext_proc_channel, header_map, request_messages, sse, with_router

pytestmark = pytest.mark.usefixtures("ext_proc_front")  # each test with both fronts

MODES = processing_mode_pb2.ProcessingMode
DUPLEX = ep.ProtocolConfiguration(request_body_mode=MODES.FULL_DUPLEX_STREAMED,
                                  response_body_mode=MODES.FULL_DUPLEX_STREAMED)


def duplex_request(headers, body: bytes, pieces: int = 3, trailers: bool = False):
    """Request headers announcing full duplex, then ``body`` in ``pieces`` chunks (the last ending the stream,
    unless request trailers follow)."""
    step = -(-len(body) // pieces)
    chunks = [body[i:i + step] for i in range(0, len(body), step)]
    messages = [ep.ProcessingRequest(protocol_config=DUPLEX, request_headers=ep.HttpHeaders(headers=header_map(
        {":method": "POST", ":path": "/v1/completions", **headers})))]
    messages += [ep.ProcessingRequest(request_body=ep.HttpBody(body=c, end_of_stream=not trailers and i == len(chunks) - 1))
                 for i, c in enumerate(chunks)]
    if trailers:
        messages.append(ep.ProcessingRequest(request_trailers=ep.HttpTrailers()))
    return messages, chunks


def duplex_response(chunks):
    return [ep.ProcessingRequest(response_headers=ep.HttpHeaders(headers=header_map({":status": "200"})))] + [
        ep.ProcessingRequest(response_body=ep.HttpBody(body=c, end_of_stream=i == len(chunks) - 1))
        for i, c in enumerate(chunks)] + [ep.ProcessingRequest(response_trailers=ep.HttpTrailers())]


async def send_all(router, messages):
    """Send every message without waiting, as Envoy does in full duplex, then read every answer."""
    async with ext_proc_channel(router) as channel:
        call = ep_grpc.ExternalProcessorStub(channel).Process()
        for message in messages:
            await call.write(message)
        await call.done_writing()
        replies = []
        while (reply := await call.read()) is not grpc.aio.EOF:
            replies.append(reply)
        return replies


def streamed_of(reply, kind):
    answer = getattr(reply, kind).response.body_mutation.streamed_response
    return answer.body, answer.end_of_stream


def test_full_duplex_routes_on_the_headers_answer_and_hands_both_bodies_back_unchanged():
    body = json.dumps({"prompt": "hello world " * 50, "max_tokens": 4, "stream": True}).encode()
    answer = sse({"choices": [{"text": "ab"}]}, {"choices": [{"text": "cd"}]},
                 {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})

    async def scenario(router, servers):
        request, chunks = duplex_request({"x-prediction-based-scheduling": "true", "x-request-id": "dup-1"}, body)
        replies = await send_all(router, request + duplex_response(answer))
        return replies, chunks, {s.address for s in servers}
    (replies, chunks, addresses), router = asyncio.run(asyncio.wait_for(with_router(scenario, TablePredictor()), 60))
    assert len(chunks) == 3
    kinds = [r.WhichOneof("response") for r in replies]
    assert kinds == ["request_headers"] + ["request_body"] * 3 + ["response_headers"] + ["response_body"] * 4 + \
        ["response_trailers"]
    headers = replies[0].request_headers.response
    (header,) = [h.header for h in headers.header_mutation.set_headers if h.header.key == DESTINATION_HEADER]
    assert [h.header.key for h in headers.header_mutation.set_headers] == [DESTINATION_HEADER]  # nothing else
    assert header.raw_value.decode() in addresses and headers.clear_route_cache
    assert replies[0].dynamic_metadata.fields["envoy.lb"].struct_value.fields[DESTINATION_HEADER].string_value == \
        header.raw_value.decode()
    assert [streamed_of(r, "request_body") for r in replies[1:4]] == [(c, i == 2) for i, c in enumerate(chunks)]
    assert b"".join(c for c, _ in (streamed_of(r, "request_body") for r in replies[1:4])) == body
    assert [streamed_of(r, "response_body") for r in replies[5:9]] == [(c, i == 3) for i, c in enumerate(answer)]
    (record,) = router.telemetry.records
    assert record.request_id == "dup-1" and record.output_tokens == 4 and record.stream
    assert record.predicted_ttft_ms == 100.0 and record.ttft_ms is not None and record.tpot_ms is not None
    assert len(router.pool.inflight) == 0


def test_full_duplex_request_trailers_end_the_body():
    body = json.dumps({"prompt": "hello", "max_tokens": 4}).encode()

    async def scenario(router, servers):
        request, chunks = duplex_request({}, body, pieces=2, trailers=True)
        return await send_all(router, request), chunks
    (replies, chunks), _ = asyncio.run(asyncio.wait_for(with_router(scenario), 60))
    assert [r.WhichOneof("response") for r in replies] == \
        ["request_headers", "request_body", "request_body", "request_trailers"]
    assert replies[0].request_headers.response.clear_route_cache
    assert [streamed_of(r, "request_body") for r in replies[1:3]] == [(c, False) for c in chunks]


def test_full_duplex_errors_are_immediate_and_end_the_stream():
    body = json.dumps({"prompt": "x"}).encode()

    async def scenario(router, servers):
        bad = await send_all(router, duplex_request({"x-slo-ttft-ms": "soon"}, body)[0])
        shed = await send_all(router, duplex_request(
            {"x-prediction-based-scheduling": "true", "x-slo-ttft-ms": "1", "x-request-priority": "-1"}, body)[0])
        malformed = await send_all(router, duplex_request({}, body[:-1])[0])
        large = await send_all(router, duplex_request({}, b"x" * (1024 * 1024 + 3), pieces=3)[0])
        empty = RouterServer(router_config([]), from_env(KafkaSettings, {}))
        await empty.start()
        try:
            none = await send_all(empty, duplex_request({}, body)[0])
        finally:
            await empty.stop()
        return bad, shed, malformed, large, none
    replies, router = asyncio.run(asyncio.wait_for(with_router(scenario, TablePredictor()), 60))
    assert [len(r) for r in replies] == [1] * 5  # the immediate answer alone: no held headers answer, no body
    answers = [r[0].immediate_response for r in replies]
    assert [(a.status.code, json.loads(a.body)["error"]["code"]) for a in answers] == [
        (400, "invalid_request"), (429, "admission_rejected"), (400, "invalid_request"),
        (413, "request_too_large"), (503, "no_servers")]
    assert "x-slo-ttft-ms" in json.loads(answers[0].body)["error"]["message"]
    assert len(router.pool.inflight) == 0 and not router.telemetry.records


def test_the_buffered_setting_answers_a_stream_without_protocol_config_as_buffered():
    async def scenario(router, servers):
        request = request_messages({"x-request-id": "buf-1"}, {"prompt": "x", "max_tokens": 2}, config=None)
        answer = json.dumps({"choices": [{"text": "ok"}], "usage": {"prompt_tokens": 1, "completion_tokens": 2}})
        return await send_all(router, request + duplex_response([answer.encode()])[:2])
    replies, router = asyncio.run(asyncio.wait_for(with_router(scenario, extProcBodyMode="buffered"), 60))
    assert [r.WhichOneof("response") for r in replies] == \
        ["request_headers", "request_body", "response_headers", "response_body"]
    assert not replies[0].request_headers.HasField("response")
    assert replies[1].request_body.response.clear_route_cache
    assert not replies[3].response_body.HasField("response")  # passed through: nothing handed back
    (record,) = router.telemetry.records
    assert record.request_id == "buf-1" and record.output_tokens == 2
