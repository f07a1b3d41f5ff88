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
from headroom.router.prompt import PromptInfo, parse_body, parse_body_off_loop
from headroom.router.service import Dispatch, RouterService

log = logging.getLogger(__name__)

DESTINATION_HEADER = "x-gateway-destination-endpoint"
MAX_METERED_JSON = 4 * 1024 * 1024  # non-streaming response bytes kept to read their usage
_REQUEST_IDS = ("x-request-id",)


class ExtProcServicer(ep_grpc.ExternalProcessorServicer):  # type: ignore[misc]  # an untyped generated base
    def __init__(self, service: RouterService):
        self.service = service
        self._next_id = 0

    async def Process(self, requests: AsyncIterator[ep.ProcessingRequest],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[ep.ProcessingResponse]:
        exchange = _Exchange(self)
        try:
            async for message in requests:
                await exchange.parse_body(message)
                response = exchange.handle(message)
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


class _Exchange:
    """The state of one HTTP request passing through Envoy."""

    def __init__(self, servicer: ExtProcServicer):
        self.servicer = servicer
        self.service = servicer.service
        self.headers: dict[str, str] = {}
        self.body = b""
        self.dispatch: Dispatch | None = None
        self.meter: StreamMeter | None = None
        self.json_body = b""
        self.done = False
        self.prompt: PromptInfo | RequestError | None = None  # the body's, parsed before it is scheduled

    def _chat(self) -> bool:
        return self.headers.get(":path", "").split("?")[0].endswith("/chat/completions")

    async def parse_body(self, message: ep.ProcessingRequest) -> None:
        """When ``message`` is the request body's last chunk, parse the whole body (off the event loop when it
        is large: :func:`~router.prompt.parse_body_off_loop`) for :meth:`handle` to schedule."""
        if message.WhichOneof("request") != "request_body" or not message.request_body.end_of_stream:
            return
        body = self.body + message.request_body.body
        if len(body) > self.service.limits.max_body_bytes:
            return  # handle() refuses it by its size
        try:
            self.prompt = (await parse_body_off_loop(body, self._chat(), self.service.limits))[1]
        except RequestError as err:
            self.prompt = err

    def handle(self, message: ep.ProcessingRequest) -> ep.ProcessingResponse:
        kind = message.WhichOneof("request")
        if kind == "request_headers":
            self.headers = {h.key.lower(): h.value or h.raw_value.decode("utf-8", "replace")
                            for h in message.request_headers.headers.headers}
            if message.request_headers.end_of_stream:
                return self._schedule(ep.ProcessingResponse(request_headers=ep.HeadersResponse()), header_only=True)
            return ep.ProcessingResponse(request_headers=ep.HeadersResponse())
        if kind == "request_body":
            try:
                self.service.limits.check_body_size(len(self.body) + len(message.request_body.body))
            except RequestTooLarge as err:
                return immediate(413, "request_too_large", str(err))
            self.body += message.request_body.body
            if not message.request_body.end_of_stream:
                return ep.ProcessingResponse(request_body=ep.BodyResponse())
            return self._schedule(ep.ProcessingResponse(request_body=ep.BodyResponse()), header_only=False)
        if kind == "response_headers":
            if self.dispatch is not None:
                stream = self.dispatch.request.stream
                self.meter = StreamMeter(self.dispatch.dispatch_mono) if stream else None
            if message.response_headers.end_of_stream:
                self._finish()
            return ep.ProcessingResponse(response_headers=ep.HeadersResponse())
        if kind == "response_body":
            self._meter(message.response_body)
            return ep.ProcessingResponse(response_body=ep.BodyResponse())
        if kind == "request_trailers":
            return ep.ProcessingResponse(request_trailers=ep.TrailersResponse())
        if kind == "response_trailers":
            self._finish()
            return ep.ProcessingResponse(response_trailers=ep.TrailersResponse())
        return ep.ProcessingResponse()

    def _schedule(self, reply: ep.ProcessingResponse, header_only: bool) -> ep.ProcessingResponse:
        try:
            headers = parse_headers(self.headers)
            if header_only:
                prompt = PromptInfo(prompt_tokens=1, max_tokens=0, stream=False, block_hashes=())
            else:
                parsed = self.prompt or parse_body(self.body, self._chat(), self.service.limits)[1]
                if isinstance(parsed, RequestError):
                    raise parsed
                prompt = parsed
            request = self.service.request_of(self.servicer.request_id(self.headers), headers, prompt)
            self.dispatch = self.service.pick(request)
        except RequestTooLarge as err:
            return immediate(413, "request_too_large", str(err))
        except RequestError as err:
            return immediate(400, "invalid_request", str(err))
        except AdmissionRejected as err:
            return immediate(429, "admission_rejected", err.reason)
        except NoCandidates as err:
            return immediate(503, "no_servers", str(err))
        address = self.dispatch.server.address
        mutation = ep.HeaderMutation(set_headers=[base_pb2.HeaderValueOption(
            header=base_pb2.HeaderValue(key=DESTINATION_HEADER, raw_value=address.encode()),
            append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD)])
        common = ep.CommonResponse(header_mutation=mutation, clear_route_cache=True)
        getattr(reply, reply.WhichOneof("response")).response.CopyFrom(common)
        metadata = struct_pb2.Struct()
        metadata.update({"envoy.lb": {DESTINATION_HEADER: address}})
        reply.dynamic_metadata.CopyFrom(metadata)
        return reply

    def _meter(self, body: ep.HttpBody) -> None:
        if self.dispatch is None or self.done:
            return
        now = self.service.monotonic()
        if self.meter is not None:
            if self.meter.feed(body.body, now):
                self.service.streamed(self.dispatch, now)
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


def immediate(status: int, code: str, message: str) -> ep.ProcessingResponse:
    """An answer Envoy sends the client itself, with an OpenAI error body."""
    body = json.dumps(error_body(status, code, message))
    return ep.ProcessingResponse(immediate_response=ep.ImmediateResponse(
        status=http_status_pb2.HttpStatus(code=status), body=body.encode(), details=code,
        headers=ep.HeaderMutation(set_headers=[base_pb2.HeaderValueOption(
            header=base_pb2.HeaderValue(key="content-type", raw_value=b"application/json"))])))
