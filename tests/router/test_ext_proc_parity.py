"""The compiled ext_proc front against the grpcio servicer, its reference: the same exchanges, played one after
another over TLS to two routers alike in everything but the front — the same servers, seed, predictor and
clocks (a clock that moves one millisecond per reading) — give the same answers (destinations, headers,
bodies, immediate responses), the same gRPC statuses, the same telemetry records and the same metrics."""

import asyncio
import itertools
import json

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc
from prometheus_client.parser import text_string_to_metric_families

from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.server import RouterServer
from tests.router.routercases import TablePredictor, router_config, wait_for
from tests.router.test_ext_proc import ext_proc_channel, header_map, sse
from tests.router.upstream import Upstream, upstreams

MODES = processing_mode_pb2.ProcessingMode
DUPLEX = ep.ProtocolConfiguration(request_body_mode=MODES.FULL_DUPLEX_STREAMED,
                                  response_body_mode=MODES.FULL_DUPLEX_STREAMED)
BUFFERED = ep.ProtocolConfiguration(request_body_mode=MODES.BUFFERED, response_body_mode=MODES.STREAMED)
HEADERS_ONLY = ep.ProtocolConfiguration(request_body_mode=MODES.NONE, response_body_mode=MODES.NONE)
UNSERVED = ep.ProtocolConfiguration(request_body_mode=MODES.BUFFERED_PARTIAL)
TIMED = {"decision_seconds", "latency_correction"}  # real time, not the test's clock


def headers(request_id, config=DUPLEX, end_of_stream=False, **extra):
    return ep.ProcessingRequest(protocol_config=config, request_headers=ep.HttpHeaders(end_of_stream=end_of_stream,
        headers=header_map({":method": "POST", ":path": "/v1/completions", "x-request-id": request_id, **extra})))


def body(data, end_of_stream=True, kind="request_body"):
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return ep.ProcessingRequest(**{kind: ep.HttpBody(body=raw, end_of_stream=end_of_stream)})


def response(content_type="application/json", end_of_stream=False):
    return ep.ProcessingRequest(response_headers=ep.HttpHeaders(end_of_stream=end_of_stream, headers=header_map(
        {":status": "200", "content-type": content_type})))


ANSWER = json.dumps({"choices": [{"text": "abcd"}], "usage": {"prompt_tokens": 5, "completion_tokens": 4}}).encode()
PROMPT = {"prompt": "the same words for every server " * 8, "max_tokens": 4}
STREAM = sse({"choices": [{"text": "ab"}]}, {"choices": [{"text": "cd"}]},
             {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}})
TRAILERS = ep.ProcessingRequest(request_trailers=ep.HttpTrailers())
EXCHANGES = {
    "duplex-json": [headers("r1"), body(PROMPT), response(), body(ANSWER, kind="response_body")],
    "duplex-chunks-trailers": [headers("r2"), body(b'{"prompt": "split ', False), body(b'in two", "max_tokens": 3}',
                                                                                     False), TRAILERS, response(),
                               body(ANSWER[:20], False, "response_body"), body(ANSWER[20:], True, "response_body")],
    "duplex-stream": [headers("r3"), body({**PROMPT, "stream": True}), response("text/event-stream"),
                      *[body(chunk, i == len(STREAM) - 1, "response_body") for i, chunk in enumerate(STREAM)]],
    "buffered": [headers("r4", BUFFERED), body(PROMPT), response(), body(ANSWER, kind="response_body")],
    "headers-only": [headers("r5", HEADERS_ONLY, True), response("text/plain", end_of_stream=True)],
    "slo-predicted": [headers("r6", **{"x-slo-ttft-ms": "900", "x-prediction-based-scheduling": "true"}),
                      body(PROMPT), response(), body(ANSWER, kind="response_body")],
    "cut-json": [headers("r7"), body(PROMPT), response(), body(ANSWER[:30], kind="response_body")],
    "ended-early": [headers("r8"), body(PROMPT)],
    "bad-header": [headers("r9", **{"x-slo-ttft-ms": "soon"}), body(PROMPT)],
    "bad-json": [headers("r10"), body(b'{"prompt": ')],
    "too-large": [headers("r11"), body(b"x" * 3000, False), body(b"x" * 2000)],
    "shed": [headers("r12", **{"x-slo-ttft-ms": "1", "x-request-priority": "-1",
                               "x-prediction-based-scheduling": "true"}), body(PROMPT)],
    "unserved-mode": [headers("r13", UNSERVED)],
    "empty": [ep.ProcessingRequest()],
}


async def play(router, messages):
    """Send ``messages`` in order (as Envoy does, without waiting), half-close, and read every answer; returns
    the answers, the gRPC status and its details."""
    async with ext_proc_channel(router) as channel:
        call = ep_grpc.ExternalProcessorStub(channel).Process(timeout=20)
        for message in messages:
            try:
                await call.write(message)
            except asyncio.InvalidStateError:  # the server ended the stream already
                break
        answers = []
        try:
            await call.done_writing()
            while (answer := await call.read()) is not grpc.aio.EOF:
                answers.append(answer)
        except grpc.aio.AioRpcError:  # the status, below
            pass
        return answers, await call.code(), await call.details()


def counting_clock(start: float):
    ticks = itertools.count()
    return lambda: start + next(ticks) / 1000.0


def metrics(router) -> dict:
    samples = {}
    for family in text_string_to_metric_families(router.metrics.exposition().decode()):
        if not any(name in family.name for name in TIMED):
            for sample in family.samples:
                if not sample.name.endswith("_created"):  # when the series was made
                        samples[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return samples


async def both(exchanges, *servers, **settings):
    """Play ``exchanges`` (name → messages) through a router with the compiled front, then through one with the
    grpcio servicer, both over the same ``servers``; returns, per front, what was played and the router."""
    async with upstreams(*servers) as started:
        return [await asyncio.wait_for(run(front, exchanges, started, **settings), 60) for front in ("native", "grpcio")]


async def run(front, exchanges, servers, **settings):
    config = router_config([s.address for s in servers], extProcFront=front, **settings)
    router = RouterServer(config, from_env(KafkaSettings, {}), predictor=TablePredictor())
    router.service.monotonic, router.service.wall = counting_clock(1000.0), counting_clock(1.7e9)
    await router.start()
    assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
    try:
        played = {name: await play(router, messages) for name, messages in exchanges.items()}
        assert await wait_for(lambda: len(router.pool.inflight) == 0)
    finally:
        await router.stop()
    return played, router


def test_both_fronts_answer_schedule_and_record_alike():
    (native, native_router), (grpcio, grpcio_router) = asyncio.run(both(
        EXCHANGES, Upstream("a", running=2, kv=0.3), Upstream("b", waiting=5, running=2, kv=0.5),
        Upstream("c", running=1, kv=0.1), maxBodyBytes=4096))
    assert native_router._native is not None and grpcio_router._native is None  # each served by its front
    for name in EXCHANGES:
        assert native[name] == grpcio[name], name
    routed = sorted(name for name, (answers, _, _) in native.items() if any(a.dynamic_metadata.fields for a in answers))
    assert routed == ["buffered", "cut-json", "duplex-chunks-trailers", "duplex-json", "duplex-stream",
                              "ended-early", "headers-only", "slo-predicted"]
    assert {name: native[name][1] for name in ("unserved-mode", "empty")} == {
        "unserved-mode": grpc.StatusCode.FAILED_PRECONDITION, "empty": grpc.StatusCode.INVALID_ARGUMENT}
    assert [native[name][0][-1].immediate_response.status.code for name in ("bad-header", "bad-json", "too-large",
                                                                            "shed")] == [400, 400, 413, 429]
    assert native_router.telemetry.records == grpcio_router.telemetry.records
    assert [r.request_id for r in native_router.telemetry.records] == ["r1", "r2", "r3", "r4", "r6"]
    assert metrics(native_router) == metrics(grpcio_router)
    errors = {labels: value for (name, labels), value in metrics(native_router).items()
              if name == "headroom_router_request_errors_total"}
    assert errors == {(("kind", "ext-proc-stream-ended"),): 1.0, (("kind", "upstream-body-truncated"),): 1.0}


def test_header_values_reach_the_scheduler_as_the_servicer_reads_them():
    """``value`` when set, else ``raw_value`` decoded (invalid UTF-8 replaced); names lower-cased."""
    raw = ep.ProcessingRequest(protocol_config=DUPLEX, request_headers=ep.HttpHeaders(headers=base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=":path", value="/v1/completions"),
                 base_pb2.HeaderValue(key="X-Request-Id", raw_value=b"id-\xff"),
                 base_pb2.HeaderValue(key="x-slo-ttft-ms", value="500", raw_value=b"ignored")])))

    (native, native_router), (grpcio, grpcio_router) = asyncio.run(both(
        {"raw": [raw, body(PROMPT), response(), body(ANSWER, kind="response_body")]}, Upstream("a")))
    assert native == grpcio and native_router.telemetry.records == grpcio_router.telemetry.records
    (record,) = native_router.telemetry.records
    assert record.request_id == "id-\ufffd" and record.slo_ttft_ms == 500.0
