"""The gRPC Pick/Report API over a real in-process grpc.aio server."""

import asyncio
import dataclasses
import json

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor

from headroom.contract.server_state import SERVER_FIELDS, ServerState
from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.app.server import RouterServer
from headroom.router.framework.roles import ServerSnapshot
from headroom.router.proto import router_pb2, router_pb2_grpc
from tests.router.routercases import OPEN_TELEMETRY, TablePredictor, router_config


def candidates(*waiting):
    return [router_pb2.ServerState(server_id=f"c{i}", address=f"10.0.0.{i}:8000", num_waiting=w, num_running=2,
                                   kv_cache_usage=0.5) for i, w in enumerate(waiting)]


async def with_router(calls, predictor=None):
    """``calls`` against a router whose Report is open to its unauthenticated callers (test_router_security.py
    covers closing it)."""
    router = RouterServer(router_config([], environ=OPEN_TELEMETRY), from_env(KafkaSettings, {}), predictor=predictor)
    await router.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{router.pick_port}") as channel:
            return await calls(router_pb2_grpc.RouterStub(channel)), router
    finally:
        await router.stop()


def run(calls, predictor=None):
    return asyncio.run(asyncio.wait_for(with_router(calls, predictor), timeout=60))


def test_pick_then_report():
    async def calls(stub):
        picked = await stub.Pick(router_pb2.PickRequest(
            request_id="r1", headers={"x-prediction-based-scheduling": "true", "x-slo-ttft-ms": "500"},
            prompt_tokens=300, max_tokens=20, stream=True, candidates=candidates(0, 30)))
        reported = await stub.Report(router_pb2.ReportRequest(request_id="r1", e2e_ms=900, ttft_ms=120,
                                                              tpot_ms=30, output_tokens=20, prompt_tokens=310))
        return picked, reported
    (picked, reported), router = run(calls, TablePredictor(base=100, per_waiting=50))
    assert picked.server_id == "c0" and picked.address == "10.0.0.0:8000" and picked.profile == "predicted"
    by_id = {c.server_id: c for c in picked.candidates}
    assert by_id["c0"].ttft_headroom_ms == 400 and by_id["c1"].ttft_headroom_ms == -1100
    assert not by_id["c1"].HasField("score")  # the tier filter removed it
    assert dict(picked.model_versions) == {"ttft": 3, "tpot": 3}
    assert reported.telemetry_sent
    (record,) = router.telemetry.records
    assert (record.server_id, record.prompt_tokens, record.ttft_ms, record.predicted_ttft_ms) == ("c0", 310, 120, 100)


def test_body_gives_the_prompt():
    async def calls(stub):
        body = json.dumps({"messages": [{"role": "user", "content": "hello " * 50}], "max_tokens": 5, "stream": True})
        return await stub.Pick(router_pb2.PickRequest(request_id="b1", body=body.encode(), chat=True,
                                                      candidates=candidates(1)))
    picked, router = run(calls)
    assert picked.server_id == "c0" and picked.profile == "heuristic"
    (pending,) = router.pool.inflight._requests.values()
    assert pending.prompt_tokens > 50


@pytest.mark.parametrize("request_, code, text", [
    pytest.param(router_pb2.PickRequest(request_id="x", headers={"x-slo-tpot-ms": "nan"}, prompt_tokens=5,
                                        candidates=candidates(0)), grpc.StatusCode.INVALID_ARGUMENT,
                 "'x-slo-tpot-ms'", id="malformed-header"),
    pytest.param(router_pb2.PickRequest(request_id="x", prompt_tokens=5), grpc.StatusCode.UNAVAILABLE,
                 "no servers", id="no-candidates"),
    pytest.param(router_pb2.PickRequest(request_id="x", prompt_tokens=5, headers={
        "x-prediction-based-scheduling": "true", "x-slo-ttft-ms": "10", "x-request-priority": "-2"},
        candidates=candidates(3, 4)), grpc.StatusCode.RESOURCE_EXHAUSTED, "priority -2", id="shed"),
    pytest.param(router_pb2.PickRequest(request_id="", prompt_tokens=5, candidates=candidates(0)),
                 grpc.StatusCode.INVALID_ARGUMENT, "request_id", id="missing-id"),
    pytest.param(router_pb2.PickRequest(request_id="x", prompt_tokens=5, candidates=[
        router_pb2.ServerState(server_id="c", address="a:1", kv_cache_usage=2.0)]), grpc.StatusCode.INVALID_ARGUMENT,
        "kv_cache_usage", id="bad-candidate"),
    pytest.param(router_pb2.PickRequest(request_id="x", prompt_tokens=5, candidates=[
        router_pb2.ServerState(server_id="c", address="a:1", token_interval_ms=-3.0)]),
        grpc.StatusCode.INVALID_ARGUMENT, "token_interval_ms must be within [0, 3.6e+06], got -3.0",
        id="bad-token-interval"),
    pytest.param(router_pb2.PickRequest(request_id="x", prompt_tokens=5, media_hashes=[7, 8], candidates=[
        router_pb2.ServerState(server_id="c", address="a:1", encoder_matched_size=3)]),
        grpc.StatusCode.INVALID_ARGUMENT, "candidate 'c': encoder_matched_size 3 exceeds encoder_input_size 2",
        id="encoder-match-beyond-the-input"),
])
def test_pick_errors(request_, code, text):
    async def calls(stub):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Pick(request_)
        return caught.value
    error, _ = run(calls, TablePredictor())
    assert error.code() == code and text in error.details()


def test_report_unknown_request():
    async def calls(stub):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Report(router_pb2.ReportRequest(request_id="nope", e2e_ms=1))
        return caught.value
    error, _ = run(calls)
    assert error.code() == grpc.StatusCode.NOT_FOUND


def test_the_candidate_message_carries_the_snapshot_fields_by_name():
    message = {f.name: f for f in router_pb2.ServerState.DESCRIPTOR.fields}
    # but the latency correction and the prefill pace, which the router learns itself from the reports
    # (with_corrections)
    assert set(message) == {f.name for f in dataclasses.fields(ServerSnapshot)} - {"latency_correction",
                                                                                   "prefill_ms_per_token"}
    for field in dataclasses.fields(ServerState):
        kind = SERVER_FIELDS[field.name].kind
        assert message[field.name].type == (FieldDescriptor.TYPE_INT64 if kind == "count"
                                            else FieldDescriptor.TYPE_DOUBLE), field.name
        # a field whose default is not the message's zero must say when it is unset
        assert message[field.name].has_presence == (field.default not in (dataclasses.MISSING, 0)), field.name
