"""The Envoy ``ext_proc`` server: the router as GKE Inference Gateway's endpoint picker.

One bidirectional stream per HTTP request (Envoy configured to send request headers and the buffered
request body, and to stream response headers and body):

- request headers: remembered (``:path`` tells completions from chat); answered with no change, unless
  the request has no body, which is then scheduled right away;
- request body (at end of stream): parsed (off the event loop when large) and scheduled; the answer sets ``x-gateway-destination-endpoint``
  to the chosen server's address (also as ``envoy.lb`` dynamic metadata) and clears the route cache; a
  malformed header or body becomes an immediate 400, a body over the size limit an immediate 413 as soon
  as its buffered chunks pass it (:mod:`router.limits`), a shed request an immediate 429 with the reason,
  no server an immediate 503;
- response headers and body chunks: passed through unchanged while metering TTFT / TPOT / E2E; the end
  of the response body completes the request (telemetry). A stream that ends early releases it.

The answers that change nothing are built once and shared; an answer routing to a server is built once per
address. Each request body chunk is copied once out of its message (a one-chunk body not again).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

from headroom.router.errors import AdmissionRejected, NoCandidates, RequestError, RequestTooLarge
from headroom.router.headers import parse_headers
from headroom.router.metering import StreamMeter, meter_json
from headroom.router.openai_api import error_body
from headroom.router.prompt import PromptInfo, parse_body_off_loop
from headroom.router.service import Dispatch, RouterService

log = logging.getLogger(__name__)

DESTINATION_HEADER = "x-gateway-destination-endpoint"
MAX_METERED_JSON = 4 * 1024 * 1024  # non-streaming response bytes kept to read their usage
MAX_ROUTED_REPLIES = 4096  # answers kept per (message kind, server address), built once each
_REQUEST_IDS = ("x-request-id",)
_HEADER_ONLY = PromptInfo(prompt_tokens=1, max_tokens=0, stream=False, block_hashes=())
# Answers that change nothing, one per message kind: built once, shared by every stream (never mutated).
_CONTINUE = {kind: ep.ProcessingResponse(**{kind: answer()}) for kind, answer in (
    ("request_headers", ep.HeadersResponse), ("request_body", ep.BodyResponse),
    ("response_headers", ep.HeadersResponse), ("response_body", ep.BodyResponse),
    ("request_trailers", ep.TrailersResponse), ("response_trailers", ep.TrailersResponse))}
_NOTHING = ep.ProcessingResponse()


class ExtProcServicer(ep_grpc.ExternalProcessorServicer):  # type: ignore[misc]  # an untyped generated base
    def __init__(self, service: RouterService):
        self.service = service
        self._next_id = 0
        self._routed: dict[tuple[str, str], ep.ProcessingResponse] = {}

    async def Process(self, requests: AsyncIterator[ep.ProcessingRequest],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[ep.ProcessingResponse]:
        exchange = _Exchange(self)
        try:
            async for message in requests:
                kind = message.WhichOneof("request")
                if kind == "request_body":
                    response = await exchange.request_body(message.request_body)
                else:
                    response = exchange.handle(kind, message)
                yield response
                if response.HasField("immediate_response"):
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
            reply = self._routed[kind, address] = _routed(kind, address)
        return reply


class _Exchange:
    """The state of one HTTP request passing through Envoy."""

    def __init__(self, servicer: ExtProcServicer):
        self.servicer = servicer
        self.service = servicer.service
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []  # the request body's chunks before its last
        self.body_size = 0
        self.dispatch: Dispatch | None = None
        self.meter: StreamMeter | None = None
        self.json_body = b""
        self.done = False

    def _chat(self) -> bool:
        return self.headers.get(":path", "").split("?")[0].endswith("/chat/completions")

    async def request_body(self, chunk: ep.HttpBody) -> ep.ProcessingResponse:
        """Keep a chunk of the request body; at its end, parse the whole body (off the event loop when it is
        large: :func:`~router.prompt.parse_body_off_loop`) and schedule the request."""
        data = chunk.body  # the one copy out of the message
        try:
            self.service.limits.check_body_size(self.body_size + len(data))
        except RequestTooLarge as err:
            return immediate(413, "request_too_large", str(err))
        if not chunk.end_of_stream:
            self.chunks.append(data)
            self.body_size += len(data)
            return _CONTINUE["request_body"]
        body = b"".join((*self.chunks, data)) if self.chunks else data
        self.chunks = []
        try:
            prompt = (await parse_body_off_loop(body, self._chat(), self.service.limits))[1]
        except RequestError as err:
            return _refusal(err)
        return self._schedule("request_body", prompt)

    def handle(self, kind: str | None, message: ep.ProcessingRequest) -> ep.ProcessingResponse:
        """The answer to any message but a request body chunk (:meth:`request_body`)."""
        if kind == "request_headers":
            self.headers = {h.key.lower(): h.value or h.raw_value.decode("utf-8", "replace")
                            for h in message.request_headers.headers.headers}
            if message.request_headers.end_of_stream:
                return self._schedule("request_headers", _HEADER_ONLY)
            return _CONTINUE["request_headers"]
        if kind == "response_headers":
            if self.dispatch is not None:
                stream = self.dispatch.request.stream
                self.meter = StreamMeter(self.dispatch.dispatch_mono) if stream else None
            if message.response_headers.end_of_stream:
                self._finish()
            return _CONTINUE["response_headers"]
        if kind == "response_body":
            self._meter(message.response_body)
            return _CONTINUE["response_body"]
        if kind == "response_trailers":
            self._finish()
        return _CONTINUE.get(kind or "", _NOTHING)

    def _schedule(self, kind: str, prompt: PromptInfo) -> ep.ProcessingResponse:
        try:
            headers = parse_headers(self.headers)
            request = self.service.request_of(self.servicer.request_id(self.headers), headers, prompt)
            self.dispatch = self.service.pick(request)
        except RequestError as err:
            return _refusal(err)
        except AdmissionRejected as err:
            return immediate(429, "admission_rejected", err.reason)
        except NoCandidates as err:
            return immediate(503, "no_servers", str(err))
        return self.servicer.routed(kind, self.dispatch.server.address)

    def _meter(self, body: ep.HttpBody) -> None:
        if self.dispatch is None or self.done:
            return
        now = self.service.monotonic()
        if self.meter is not None:
            texts = self.meter.text_chunks
            if self.meter.feed(body.body, now):  # once per text event, however the bytes were cut
                self.service.streamed(self.dispatch, now, self.meter.text_chunks - texts)
        elif len(self.json_body) < MAX_METERED_JSON:
            self.json_body += body.body
        if body.end_of_stream:
            self._finish()

    def _finish(self) -> None:
        if self.dispatch is None or self.done:
            return
        self.done = True
        now = self.service.monotonic()
        completion = (self.meter.finish(now) if self.meter is not None
                      else meter_json(self.json_body, self.dispatch.dispatch_mono, now))
        self.service.complete(self.dispatch, completion)

    def close(self) -> None:
        if self.dispatch is not None and not self.done:
            self.done = True
            self.service.abandon(self.dispatch, "ext-proc-stream-ended")


def _routed(kind: str, address: str) -> ep.ProcessingResponse:
    """An answer to a ``kind`` message setting the destination header (and ``envoy.lb`` dynamic metadata) to
    ``address`` and clearing the route cache."""
    mutation = ep.HeaderMutation(set_headers=[base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=DESTINATION_HEADER, raw_value=address.encode()),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD)])
    common = ep.CommonResponse(header_mutation=mutation, clear_route_cache=True)
    answer = ep.HeadersResponse(response=common) if kind == "request_headers" else ep.BodyResponse(response=common)
    metadata = struct_pb2.Struct()
    metadata.update({"envoy.lb": {DESTINATION_HEADER: address}})
    return ep.ProcessingResponse(**{kind: answer}, dynamic_metadata=metadata)


def _refusal(err: RequestError) -> ep.ProcessingResponse:
    if isinstance(err, RequestTooLarge):
        return immediate(413, "request_too_large", str(err))
    return immediate(400, "invalid_request", str(err))


def immediate(status: int, code: str, message: str) -> ep.ProcessingResponse:
    """An answer Envoy sends the client itself, with an OpenAI error body."""
    body = json.dumps(error_body(status, code, message))
    return ep.ProcessingResponse(immediate_response=ep.ImmediateResponse(
        status=http_status_pb2.HttpStatus(code=status), body=body.encode(), details=code,
        headers=ep.HeaderMutation(set_headers=[base_pb2.HeaderValueOption(
            header=base_pb2.HeaderValue(key="content-type", raw_value=b"application/json"))])))
