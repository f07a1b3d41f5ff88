"""The Envoy ``ext_proc`` server: the router as GKE Inference Gateway's endpoint picker.

One bidirectional stream per HTTP request. Envoy (1.34 on) says on the stream's first message
(``protocol_config``) how it sends each body; when it does not, the ``ext_proc_body_mode`` setting says
(``full-duplex`` by default, as the Gateway API Inference Extension's Envoy is configured):

- ``FULL_DUPLEX_STREAMED`` (bodies streamed, headers and trailers sent), where Envoy forwards only what the
  answers hand back. The request headers' answer waits for the body's end; then the request is scheduled and
  answered with the headers' answer (the destination) followed by the body's chunks, handed back unchanged one
  at a time (the last with ``end_of_stream``); Envoy strips ``content-length`` in this mode and sends the body
  on chunked.
  Response headers are answered at once, and each response body chunk handed back unchanged as it is metered.
- request body ``BUFFERED``: the request headers are answered with no change and the buffered body — the
  whole body in one message, with ``end_of_stream`` or not (trailers may follow) — with the destination;
  response messages are answered with no change (or handed back, response body full duplex).
- request body ``NONE``: the request is scheduled on its headers alone.

In full duplex, request trailers arriving before the request is scheduled end its body, as its end of stream
would. A request scheduled without its body (``NONE``, or none sent) is completed without a telemetry record:
its prompt is unknown. Any other request body mode (``STREAMED``, ``BUFFERED_PARTIAL``, ``GRPC``) is refused:
logged as an error and the stream ended with gRPC ``FAILED_PRECONDITION``, which Envoy answers with a 500 unless
its ``failure_mode_allow`` lets the request pass unrouted. A message that carries none of the six kinds ends
the stream with ``INVALID_ARGUMENT``.

Scheduling: the body (at its end) is parsed (off the event loop when large) and scheduled; the routing answer
sets ``x-gateway-destination-endpoint`` to the chosen server's address (also as ``envoy.lb`` dynamic
metadata) and clears the route cache; a request without a body is scheduled on its headers. A malformed
header or body becomes an immediate 400, a body over the size limit an immediate 413 as soon as its chunks
pass it (:mod:`router.control.limits`), a shed request an immediate 429 with the reason, no server an immediate 503.
Response headers and body chunks meter TTFT / TPOT / E2E; the end of the response body completes the
request (telemetry). A stream that ends early releases it.

Callers (:class:`~router.fronts.auth.TelemetryTrust`): with a gateway credential configured, a stream whose caller
does not prove it is the gateway is refused with ``UNAUTHENTICATED`` (counted in
``headroom_router_unauthenticated_total{listener="ext_proc"}``); without one, streams are routed but their
exchanges produce no telemetry (``headroom_router_telemetry_records_total{outcome="unauthenticated"}``), since
the caller, not the router, says when each response byte passed.

The answers that change nothing are built once and shared; an answer routing to a server is built once per
address (:mod:`router.fronts.ext_proc_answers`). Each request body chunk is copied once out of its message (a
one-chunk body not again).

This grpcio servicer is the reference front; the compiled one (:mod:`router.fronts.ext_proc_front`, the default) speaks
the same protocol on a thread of its own and hands each request's :class:`Exchange` — the router's side of it,
which both share — to the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable, Iterator

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

from headroom.router.control.headers import parse_headers
from headroom.router.control.limits import RequestLimits
from headroom.router.control.metering import Completion, StreamMeter, meter_json
from headroom.router.control.prompt import OFF_LOOP_BYTES, PromptInfo, parse_body
from headroom.router.control.service import Dispatch, RouterService
from headroom.router.errors import AdmissionRejected, NoCandidates, RequestError, RequestTooLarge
from headroom.router.fronts.auth import TelemetryTrust
from headroom.router.fronts.ext_proc_answers import (
    CONTINUE,
    DESTINATION_HEADER,
    FULL_DUPLEX,
    MODES,
    NOTHING,
    immediate,
    refusal,
    routed,
    streamed,
)

__all__ = ["DESTINATION_HEADER", "HEADER_ONLY", "MAX_ROUTED_REPLIES", "Exchange", "ExtProcServicer", "prompt_of",
           "prompt_off_loop"]

log = logging.getLogger(__name__)

MAX_METERED_JSON = 4 * 1024 * 1024  # non-streaming response bytes kept to read their usage
MAX_ROUTED_REPLIES = 4096  # answers kept per (message kind, server address), built once each
_REQUEST_IDS = ("x-request-id",)
NOT_GATEWAY = "the caller is not the gateway: no gateway token or certificate identity"
REFUSAL_WAIT_S = 1.0  # how long a refused caller's first message is waited for
HEADER_ONLY = PromptInfo(prompt_tokens=1, max_tokens=0, stream=False, block_hashes=())
_REQUEST_BODY_MODES = (MODES.NONE, MODES.BUFFERED, FULL_DUPLEX)  # those served; any other is refused
EMPTY_REQUEST = ("a ProcessingRequest must carry one of request_headers, request_body, request_trailers, "
                 "response_headers, response_body or response_trailers")
BODY_MODES = {"full-duplex": FULL_DUPLEX, "buffered": MODES.BUFFERED}  # the ext_proc_body_mode setting's values
Answers = Iterable[ep.ProcessingResponse]


class ExtProcServicer(ep_grpc.ExternalProcessorServicer):  # type: ignore[misc]  # an untyped generated base
    def __init__(self, service: RouterService, body_mode: str = "full-duplex", trust: TelemetryTrust | None = None):
        """``trust`` judges each stream's caller (None: no judge, every exchange is telemetry — a servicer
        driven in this process, with no caller to check)."""
        self.service = service
        self.body_mode = BODY_MODES[body_mode]  # when a stream has no protocol_config
        self.trust = trust
        self._next_id = 0
        self._routed: dict[tuple[str, str], ep.ProcessingResponse] = {}

    async def Process(self, requests: AsyncIterator[ep.ProcessingRequest],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[ep.ProcessingResponse]:
        trusted = True if self.trust is None else self.trust.ext_proc(context)
        if trusted is None:
            self.service.metrics.child(self.service.metrics.unauthenticated, "ext_proc").inc()
            # refused once the caller's first message has come (or the stream's end, or a second), as the compiled
            # front does: a client that writes before it reads then reads this status, not its write failing
            with contextlib.suppress(asyncio.TimeoutError, StopAsyncIteration):
                await asyncio.wait_for(anext(aiter(requests)), REFUSAL_WAIT_S)
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, NOT_GATEWAY)
        exchange = Exchange(self, bool(trusted))
        try:
            async for message in requests:
                if message.HasField("protocol_config") and (refused := exchange.configure(message.protocol_config)):
                    log.error("ext_proc stream refused: %s", refused)
                    await context.abort(grpc.StatusCode.FAILED_PRECONDITION, refused)
                kind = message.WhichOneof("request")
                if kind is None:  # nothing to answer: a client that is not Envoy, or a broken one
                    log.error("ext_proc stream refused: %s", EMPTY_REQUEST)
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, EMPTY_REQUEST)
                if kind == "request_body" or (kind == "request_trailers" and exchange.dispatch is None):
                    answers = await exchange.request_body(message)
                else:
                    answers = exchange.handle(kind, message)
                for answer in answers:
                    yield answer
                    if answer.HasField("immediate_response"):
                        return
        finally:
            exchange.close()

    def request_id(self, headers: dict[str, str]) -> str:
        for name in _REQUEST_IDS:
            if headers.get(name):
                return headers[name]
        self._next_id += 1
        return f"ext-proc-{id(self):x}-{self._next_id}"

    def routed(self, kind: str, address: str) -> ep.ProcessingResponse:
        """The answer to a ``kind`` message that sends its request to ``address`` (built once per address)."""
        reply = self._routed.get((kind, address))
        if reply is None:
            if len(self._routed) >= MAX_ROUTED_REPLIES:  # addresses come and go with the pool's pods
                self._routed.clear()
            reply = self._routed[kind, address] = routed(kind, address)
        return reply


class Exchange:
    """The state of one HTTP request passing through Envoy: the grpcio servicer's messages read into it, and the
    router's side of it — scheduling, metering, completion — which the compiled front drives too."""

    def __init__(self, servicer: ExtProcServicer, trusted: bool):
        self.servicer = servicer
        self.service = servicer.service
        self.trusted = trusted  # its measurements become telemetry
        self.duplex_request = self.duplex_response = servicer.body_mode == FULL_DUPLEX  # hand the bodies back
        self.response_streamed = self.duplex_response  # the response body comes as it is sent, not at its end
        self.headers_only = False  # request body mode NONE: schedule on the headers
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []  # the request body's chunks before its last
        self.body_size = 0
        self.dispatch: Dispatch | None = None
        self.meter: StreamMeter | None = None
        self.json_body = b""
        self.json_answer = False  # the response says it is JSON
        self.measured = False  # scheduled on its body (not on its headers alone)
        self.done = False

    def configure(self, config: ep.ProtocolConfiguration) -> str | None:
        """Take the stream's body modes; the reason it is refused if its request body mode is not served."""
        if config.request_body_mode not in _REQUEST_BODY_MODES:
            return (f"request body mode {MODES.BodySendMode.Name(config.request_body_mode)} is not supported "
                    "(FULL_DUPLEX_STREAMED, BUFFERED or NONE are)")
        self.duplex_request = config.request_body_mode == FULL_DUPLEX
        self.headers_only = config.request_body_mode == MODES.NONE
        self.duplex_response = config.response_body_mode == FULL_DUPLEX
        self.response_streamed = config.response_body_mode in (MODES.STREAMED, FULL_DUPLEX)
        return None

    def chat(self) -> bool:
        return self.headers.get(":path", "").split("?")[0].endswith("/chat/completions")

    async def request_body(self, message: ep.ProcessingRequest) -> Answers:
        """Keep a chunk of the request body; at its end (or at the request trailers), parse the whole body (off
        the event loop when it is large: :func:`prompt_off_loop`) and schedule the request."""
        trailers = message.HasField("request_trailers")
        data = b"" if trailers else message.request_body.body  # the one copy out of the message
        try:
            self.service.limits.check_body_size(self.body_size + len(data))
        except RequestTooLarge as err:
            return (immediate(413, "request_too_large", str(err)),)
        if self.duplex_request and not trailers and not message.request_body.end_of_stream:
            self.chunks.append(data)
            self.body_size += len(data)
            return ()  # answered with the whole body
        chunks, self.chunks = (self.chunks if trailers else [*self.chunks, data]), []
        body = b"".join(chunks) if len(chunks) != 1 else chunks[0]
        prompt = await prompt_off_loop(body, self.chat(), self.service.limits)
        if not self.duplex_request:  # the buffered body: Envoy holds the headers until this answer
            return (self.schedule_body("request_body", prompt),)
        headers = self.schedule_body("request_headers", prompt)
        if headers.HasField("immediate_response"):
            return (headers,)
        return _hand_back(headers, chunks, trailers)  # the joined body dropped

    def handle(self, kind: str | None, message: ep.ProcessingRequest) -> Answers:
        """The answers to any message but a request body chunk (:meth:`request_body`)."""
        if kind == "request_headers":
            self.headers = {h.key.lower(): h.value or h.raw_value.decode("utf-8", "replace")
                            for h in message.request_headers.headers.headers}
            if message.request_headers.end_of_stream or self.headers_only:
                return (self.schedule("request_headers", HEADER_ONLY),)
            return () if self.duplex_request else CONTINUE["request_headers"]
        if kind == "response_headers":
            self.json_answer = any(h.key.lower() == "content-type" and (h.value or h.raw_value.decode("latin-1"))
                                   .startswith("application/json") for h in message.response_headers.headers.headers)
            if self.dispatch is not None:
                stream = self.dispatch.request.stream
                self.meter = StreamMeter(self.dispatch.dispatch_mono) if stream else None
            if message.response_headers.end_of_stream:
                self.finish()
            return CONTINUE["response_headers"]
        if kind == "response_body":
            body = message.response_body
            self.meter_body(body.body, body.end_of_stream)
            return (streamed("response_body", body.body, body.end_of_stream),) if self.duplex_response \
                else CONTINUE["response_body"]
        if kind == "response_trailers":
            self.finish()
        answers: Answers = CONTINUE.get(kind or "", NOTHING)  # trailers, or a kind this module does not know
        return answers

    def schedule_body(self, kind: str, prompt: PromptInfo | RequestError) -> ep.ProcessingResponse:
        """The answer to the request's whole body: parsed (:func:`prompt_of`), the request scheduled; malformed,
        refused."""
        if isinstance(prompt, RequestError):
            return refusal(prompt)
        self.measured = True
        return self.schedule(kind, prompt)

    def schedule(self, kind: str, prompt: PromptInfo) -> ep.ProcessingResponse:
        try:
            headers = parse_headers(self.headers)
            request = self.service.request_of(self.servicer.request_id(self.headers), headers, prompt)
            self.dispatch = self.service.pick(request, watched=self.trusted and self.response_streamed)
        except RequestError as err:
            return refusal(err)
        except AdmissionRejected as err:
            return immediate(429, "admission_rejected", err.reason)
        except NoCandidates as err:
            return immediate(503, "no_servers", str(err))
        return self.servicer.routed(kind, self.dispatch.server.address)

    def meter_body(self, data: bytes, end_of_stream: bool) -> None:
        """A chunk of the response body passed: fed to the stream's meter, or kept to read its JSON usage."""
        if self.dispatch is None or self.done:
            return
        if self.meter is not None:
            now = self.service.monotonic()
            texts = self.meter.text_chunks
            if self.meter.feed(data, now):  # once per text event, however the bytes were cut
                self.service.streamed(self.dispatch, now, self.meter.text_chunks - texts, trusted=self.trusted)
        elif len(self.json_body) < MAX_METERED_JSON:
            self.json_body += data
        if end_of_stream:
            self.finish()

    def finish(self) -> None:
        """The response ended: complete the request (abandoned if its JSON answer was cut short)."""
        if self.dispatch is None or self.done:
            return
        self.done = True
        now = self.service.monotonic()
        completion = (self.meter.finish(now) if self.meter is not None
                      else meter_json(self.json_body, self.dispatch.dispatch_mono, now))
        if completion is None and self.json_answer and len(self.json_body) < MAX_METERED_JSON:
            self.service.abandon(self.dispatch, "upstream-body-truncated")  # cut short: nothing to learn from
            return
        self.service.complete(self.dispatch, completion or Completion(e2e_ms=(now - self.dispatch.dispatch_mono) * 1000.0,
                                                                      output_tokens=0), self.measured,
                              trusted=self.trusted)

    def close(self) -> None:
        if self.dispatch is not None and not self.done:
            self.done = True
            self.service.abandon(self.dispatch, "ext-proc-stream-ended")


def prompt_of(body: bytes, chat: bool, limits: RequestLimits) -> PromptInfo | RequestError:
    """The prompt facts of a request's whole body (:func:`~router.control.prompt.parse_body`, on the thread that calls
    it), or why the request is refused."""
    try:
        return parse_body(body, chat, limits)[1]
    except RequestError as err:
        return err


async def prompt_off_loop(body: bytes, chat: bool, limits: RequestLimits) -> PromptInfo | RequestError:
    """:func:`prompt_of`, on a worker thread when the body is over :data:`~router.control.prompt.OFF_LOOP_BYTES`: the event
    loop serves other requests meanwhile."""
    if len(body) <= OFF_LOOP_BYTES:
        return prompt_of(body, chat, limits)
    return await asyncio.to_thread(prompt_of, body, chat, limits)


def _hand_back(headers: ep.ProcessingResponse, chunks: list[bytes], trailers: bool) -> Iterator[ep.ProcessingResponse]:
    """The held headers answer, then the body's chunks handed back one at a time, each dropped once answered
    (the last with ``end_of_stream``, unless the request trailers end the body)."""
    yield headers
    last = len(chunks) - 1
    for i in range(len(chunks)):
        chunk, chunks[i] = chunks[i], b""
        yield streamed("request_body", chunk, i == last and not trailers)
    if trailers:
        yield from CONTINUE["request_trailers"]
