"""The compiled ext_proc front against the grpcio servicer, its reference: the same exchanges, played one after
another over TLS to two routers alike in everything but the front — the same servers, seed, predictor and
clocks (a clock that moves one millisecond per reading) — give the same answers (destinations, headers,
bodies, immediate responses), the same gRPC statuses, the same telemetry records and the same metrics.

The same holds for who may produce telemetry: under each way the router knows the gateway (its token, its
certificate's identity over mTLS, the network's word, none, or the rule lifted), callers with and without the
credential are refused, routed without telemetry or trusted alike."""

import asyncio
import functools
import itertools
import json
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc
from prometheus_client.parser import text_string_to_metric_families

from headroom.certificates import CertificateAuthority
from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.app.server import RouterServer
from headroom.router.fronts.ext_proc import NOT_GATEWAY
from tests.router.routercases import (
    GATEWAY_TOKEN,
    OPEN_TELEMETRY,
    TablePredictor,
    gateway_environ,
    router_config,
    wait_for,
)
from tests.router.test_ext_proc import header_map, sse
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


@dataclass(frozen=True)
class Caller:
    """Who plays an exchange: the ``authorization`` values it sends (in order), the client ``certificate`` (PEM
    files of a certificate and its key) it presents, and the CA it trusts for the router's (None: the router's
    own certificate, self-signed)."""

    authorization: tuple[str, ...] = ()
    certificate: tuple[Path, Path] | None = None
    ca: Path | None = None

    def channel(self, router) -> grpc.aio.Channel:
        cert, key = self.certificate or (None, None)
        credentials = grpc.ssl_channel_credentials(
            self.ca.read_bytes() if self.ca else router.ext_proc_certificate, key.read_bytes() if key else None,
            cert.read_bytes() if cert else None)
        return grpc.aio.secure_channel(f"127.0.0.1:{router.ext_proc_port}", credentials)


GATEWAY = Caller((f"Bearer {GATEWAY_TOKEN}",))


async def play(router, messages, caller=GATEWAY):
    """Send ``messages`` in order (as Envoy does, without waiting) as ``caller``, half-close, and read every
    answer; returns the answers, the gRPC status and its details."""
    async with caller.channel(router) as channel:
        call = ep_grpc.ExternalProcessorStub(channel).Process(
            timeout=20, metadata=tuple(("authorization", value) for value in caller.authorization))
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


async def lockstep(router, messages, caller, pause_s=0.0):
    """Send ``messages`` one at a time as ``caller``, reading each one's answer (a body mode with one answer per
    message), until the last or the status that ends the stream, the first ``pause_s`` after the stream opens;
    returns as :func:`play` does."""
    async with caller.channel(router) as channel:
        call = ep_grpc.ExternalProcessorStub(channel).Process(
            timeout=20, metadata=tuple(("authorization", value) for value in caller.authorization))
        await asyncio.sleep(pause_s)
        answers = []
        try:
            for message in messages:
                await call.write(message)
                answers.append(await call.read())
            await call.done_writing()
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


async def both(exchanges, *servers, callers=None, environ=None, player=play, **settings):
    """Play ``exchanges`` (name → messages) through a router with the compiled front, then through one with the
    grpcio servicer, both over the same ``servers``, each as its caller (name → :class:`Caller`; the gateway,
    by its token, when not named) to routers with ``environ`` (the gateway's token when None); returns, per
    front, what was played (by ``player``) and the router."""
    # both decide on clocks from one start: the machine's monotonic time, which stamps the scrapes (a start ahead
    # of it would make every scrape look older than the producer's limit on a machine up for minutes only)
    start = time.monotonic()
    async with upstreams(*servers) as started:
        return [await asyncio.wait_for(run(front, exchanges, started, callers or {}, environ, player, start,
                                           **settings), 60) for front in ("native", "grpcio")]


async def run(front, exchanges, servers, callers, environ, player, start, **settings):
    config = router_config([s.address for s in servers], extProcFront=front,
                           environ=gateway_environ() if environ is None else environ, **settings)
    router = RouterServer(config, from_env(KafkaSettings, {}), predictor=TablePredictor())
    router.service.monotonic, router.service.wall = counting_clock(start), counting_clock(1.7e9)
    await router.start()
    assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
    try:
        played = {name: await player(router, messages, callers.get(name, GATEWAY))
                  for name, messages in exchanges.items()}
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


def caller_cases(pki, tmp_path):
    """Per way of knowing the gateway: the router's environment, its callers and which of them are the gateway."""
    ca = CertificateAuthority.load(pki.ca, pki.ca.with_name("ca.key"))
    certificates = {name: ca.issue(cn, hosts).write(tmp_path, name) for name, cn, hosts in [
        ("by-dns-name", "envoy", ("gateway.llm.svc",)), ("by-address", "envoy", ("10.1.2.3",)),
        ("by-common-name", "gateway-cn", ())]}
    by_token = {"gateway": GATEWAY, "lower-case-scheme": Caller((f"bearer  {GATEWAY_TOKEN}",)),
                "last-value-counts": Caller(("Bearer a-guess", f"Bearer {GATEWAY_TOKEN}")),
                "anonymous": Caller(), "guess": Caller(("Bearer a-guess",)),
                "other-scheme": Caller((f"Basic {GATEWAY_TOKEN}",)), "first-value-only": Caller((
                    f"Bearer {GATEWAY_TOKEN}", "Bearer a-guess"))}
    by_identity = {**{name: Caller(certificate=pair, ca=pki.ca) for name, pair in certificates.items()},
                   "other-client": Caller(certificate=pki.client, ca=pki.ca),
                   "other-client-with-token": Caller((f"Bearer {GATEWAY_TOKEN}",), pki.client, pki.ca)}
    mtls = {"HEADROOM_TLS_CERT_FILE": str(pki.server[0]), "HEADROOM_TLS_KEY_FILE": str(pki.server[1]),
            "HEADROOM_TLS_CLIENT_CA_FILE": str(pki.ca),
            "HEADROOM_ROUTER_GATEWAY_IDENTITIES": "gateway.llm.svc, 10.1.2.3,gateway-cn, spiffe://other"}
    token_gateway = {"gateway", "lower-case-scheme", "last-value-counts"}
    return {"gateway-token": (gateway_environ(), by_token, token_gateway),
            "gateway-identity": (mtls, by_identity, set(certificates)),
            "no-credential": ({}, by_token, None),
            "by-network": ({"HEADROOM_ROUTER_GATEWAY_BY_NETWORK": "true"}, by_token, set(by_token)),
            "unauthenticated-telemetry": (OPEN_TELEMETRY, by_token, set(by_token))}


@pytest.mark.parametrize("case", ["gateway-token", "gateway-identity", "no-credential", "by-network",
                                  "unauthenticated-telemetry"])
def test_both_fronts_take_telemetry_from_the_same_callers(pki, tmp_path, case):
    """``None`` for the gateway: no credential is configured, so every caller is routed and none is trusted."""
    environ, callers, gateway = caller_cases(pki, tmp_path)[case]
    exchanges = {name: [headers(name, BUFFERED), body(PROMPT), response(), body(ANSWER, kind="response_body")]
                 for name in callers}
    (native, native_router), (grpcio, grpcio_router) = asyncio.run(both(
        exchanges, Upstream("a"), Upstream("b", waiting=2), callers=callers, environ=environ, player=lockstep))
    assert native == grpcio
    assert native_router.telemetry.records == grpcio_router.telemetry.records
    assert metrics(native_router) == metrics(grpcio_router)
    trusted = {r.request_id for r in native_router.telemetry.records}
    refused = {name for name, (_, code, _) in native.items() if code == grpc.StatusCode.UNAUTHENTICATED}
    routed = {name for name, (answers, code, _) in native.items() if code == grpc.StatusCode.OK and answers}
    counted = metrics(native_router)
    if gateway is None:
        assert trusted == refused == set() and routed == set(callers)
        assert counted["headroom_router_telemetry_records_total", (("outcome", "unauthenticated"),)] == len(callers)
    else:
        assert trusted == gateway and refused == set(callers) - gateway and routed == gateway
        assert counted.get(("headroom_router_unauthenticated_total", (("listener", "ext_proc"),)), 0) == len(refused)


def test_a_refused_caller_reads_its_refusal_after_writing():
    """A stranger that opens its stream and writes a moment later reads UNAUTHENTICATED from both fronts: the
    refusal waits for its first message, so the write neither fails nor finds the stream already closed."""
    exchanges = {"guess": [headers("guess", BUFFERED), body(PROMPT)]}
    callers = {"guess": Caller(("Bearer a-guess",))}
    (native, _), (grpcio, _) = asyncio.run(both(exchanges, Upstream("a"), callers=callers,
                                                player=functools.partial(lockstep, pause_s=0.3)))
    assert native == grpcio == {"guess": ([], grpc.StatusCode.UNAUTHENTICATED, NOT_GATEWAY)}
