"""The ext_proc server's body modes beyond the two announced ones: a stream without ``protocol_config`` (Envoy
before 1.34) answered in the setting's mode, a buffered body whole in one message whether trailers follow or
not, a request body mode ``NONE`` routed on the headers (and sending no telemetry), and the modes the router
does not serve refused loudly."""

import asyncio
import json
import logging

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

from headroom.router.app.config import ConfigError
from headroom.router.fronts.ext_proc import DESTINATION_HEADER
from tests.router.routercases import GATEWAY_TOKEN, TablePredictor, router_config
from tests.router.test_ext_proc import MODES, ext_proc_channel, request_messages, with_router
from tests.router.test_ext_proc_duplex import duplex_request, duplex_response, send_all, streamed_of

pytestmark = pytest.mark.usefixtures("ext_proc_front")  # each test with both fronts


def destination(reply):
    return reply.dynamic_metadata.fields["envoy.lb"].struct_value.fields[DESTINATION_HEADER].string_value


def test_a_full_duplex_stream_without_protocol_config_is_routed_and_its_body_handed_back_by_default():
    body = json.dumps({"prompt": "hello world " * 20, "max_tokens": 4}).encode()

    async def scenario(router, servers):
        request, chunks = duplex_request({"x-request-id": "old-envoy"}, body)
        request[0].ClearField("protocol_config")
        return await send_all(router, request), chunks, {s.address for s in servers}
    (replies, chunks, addresses), router = asyncio.run(asyncio.wait_for(with_router(scenario), 60))
    assert [r.WhichOneof("response") for r in replies] == ["request_headers"] + ["request_body"] * 3
    set_headers = {h.header.key: h.header.raw_value.decode() for h in
                   replies[0].request_headers.response.header_mutation.set_headers}
    assert set_headers[DESTINATION_HEADER] in addresses
    assert [streamed_of(r, "request_body") for r in replies[1:]] == [(c, i == 2) for i, c in enumerate(chunks)]
    assert 'request_errors_total{kind="ext-proc-stream-ended"} 1.0' in router.metrics.exposition().decode()  # dispatched


@pytest.mark.parametrize("trailers", [True, False], ids=["trailers-sent", "trailers-skipped"])
def test_a_buffered_body_without_end_of_stream_is_whole_and_routed_on_its_answer(trailers):
    async def scenario(router, servers):
        headers, body = request_messages({"x-request-id": "trailed"}, {"prompt": "hello", "max_tokens": 2})
        body.request_body.end_of_stream = False  # Envoy's buffered body when the request has trailers
        more = [ep.ProcessingRequest(request_trailers=ep.HttpTrailers())] if trailers else []
        return await send_all(router, [headers, body, *more]), {s.address for s in servers}
    (replies, addresses), _ = asyncio.run(asyncio.wait_for(with_router(scenario), 60))
    assert [r.WhichOneof("response") for r in replies] == ["request_headers", "request_body"] + (
        ["request_trailers"] if trailers else [])
    (header,) = replies[1].request_body.response.header_mutation.set_headers  # Envoy still holds the headers
    assert header.header.raw_value.decode() in addresses and destination(replies[1]) in addresses


def test_request_body_mode_none_is_routed_on_the_headers_and_sends_no_telemetry():
    answer = [b'data: {"choices": [{"text": "ab"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}\n\n']

    async def scenario(router, servers):
        headers = request_messages({}, {"prompt": "x"},
                                   config=ep.ProtocolConfiguration(request_body_mode=MODES.NONE))[0]
        return await send_all(router, [headers, *duplex_response(answer)]), {s.address for s in servers}
    (replies, addresses), router = asyncio.run(asyncio.wait_for(with_router(scenario), 60))
    reply = replies[0]
    (header,) = reply.request_headers.response.header_mutation.set_headers
    assert header.header.raw_value.decode() in addresses and reply.request_headers.response.clear_route_cache
    assert not router.telemetry.records and not router.pool.inflight.load()  # completed, its prompt unknown
    assert 'telemetry_records_total{outcome="no_body"} 1.0' in router.metrics.exposition().decode()


@pytest.mark.parametrize("mode", ["STREAMED", "BUFFERED_PARTIAL", "GRPC"])
def test_unserved_request_body_modes_are_refused_with_failed_precondition(mode, caplog):
    config = ep.ProtocolConfiguration(request_body_mode=MODES.BodySendMode.Value(mode), response_body_mode=MODES.STREAMED)

    async def scenario(router, servers):
        async with ext_proc_channel(router) as channel:  # the first message alone: the stream ends on it
            call = ep_grpc.ExternalProcessorStub(channel).Process()
            await call.write(request_messages({}, {"prompt": "x"}, config=config)[0])
            return await call.code(), await call.details()
    with caplog.at_level(logging.ERROR, logger="headroom.router.fronts.ext_proc"):
        (code, details), router = asyncio.run(asyncio.wait_for(with_router(scenario), 60))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and mode in details
    assert any(mode in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)
    assert not router.pool.inflight.load() and not router.telemetry.records


def test_the_body_mode_setting_takes_full_duplex_or_buffered_only():
    assert router_config([], extProcBodyMode="buffered").settings.ext_proc_body_mode == "buffered"
    with pytest.raises(ConfigError, match="extProcBodyMode"):
        router_config([], extProcBodyMode="streamed")


@pytest.mark.parametrize("response_mode, token, priced", [
    (MODES.STREAMED, GATEWAY_TOKEN, True), (MODES.BUFFERED, GATEWAY_TOKEN, False), (MODES.STREAMED, None, False)],
    ids=["streamed", "buffered-response", "untrusted"])
def test_streams_waiting_for_a_first_token_price_their_server_only_when_a_trusted_gateway_streams_the_response(
        response_mode, token, priced):
    config = ep.ProtocolConfiguration(request_body_mode=MODES.BUFFERED, response_body_mode=response_mode)
    body = {"prompt": "hello", "max_tokens": 4, "stream": True}

    async def scenario(router, servers):
        calls = []
        async with ext_proc_channel(router, token) as channel:
            for i in range(3):  # routed, then no answer: they wait for their first tokens
                call = ep_grpc.ExternalProcessorStub(channel).Process()
                for message in request_messages({"x-request-id": f"w{i}"}, body, config):
                    await call.write(message)
                    await call.read()
                calls.append(call)
            await asyncio.sleep(0.5)  # 5x the model's 100 ms on the idle server
            factors = [f for _, target, f in router.pool.latency_corrections(router.service.monotonic())
                       if target == "ttft"]
            for call in calls:
                call.cancel()
        return factors
    no_gateway = {"HEADROOM_ROUTER_GATEWAY_TOKENS_FILE": ""} if token is None else {}  # every caller routed, none trusted
    factors, _ = asyncio.run(asyncio.wait_for(with_router(scenario, TablePredictor(), no_gateway), 60))
    assert (max(factors) > 2.0) if priced else (factors == [1.0, 1.0]), factors
