"""The ext_proc server's answers to Envoy (:mod:`router.fronts.ext_proc`): built here, once where they can be.

- :data:`CONTINUE`: per message kind, the answer that changes nothing, shared by every stream (never mutated);
- :func:`routed`: the answer sending a request to a server — the ``x-gateway-destination-endpoint`` header (also
  as ``envoy.lb`` dynamic metadata) and a cleared route cache;
- :func:`streamed`: a body chunk handed back in ``FULL_DUPLEX_STREAMED`` mode, where Envoy forwards only the body
  the server sends back;
- :func:`immediate` / :func:`refusal`: an answer Envoy sends the client itself, with an OpenAI error body.
"""

from __future__ import annotations

import json

from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

from headroom.router.errors import RequestError, RequestTooLarge
from headroom.router.fronts.openai_api import error_body

DESTINATION_HEADER = "x-gateway-destination-endpoint"
MODES = processing_mode_pb2.ProcessingMode
FULL_DUPLEX = MODES.FULL_DUPLEX_STREAMED
CONTINUE: dict[str, tuple[ep.ProcessingResponse, ...]] = {kind: (ep.ProcessingResponse(**{kind: answer()}),) for kind, answer in (
    ("request_headers", ep.HeadersResponse), ("request_body", ep.BodyResponse),
    ("response_headers", ep.HeadersResponse), ("response_body", ep.BodyResponse),
    ("request_trailers", ep.TrailersResponse), ("response_trailers", ep.TrailersResponse))}
NOTHING: tuple[ep.ProcessingResponse, ...] = (ep.ProcessingResponse(),)


def _header(key: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=key, raw_value=value.encode()),
                                      append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD)


def routed(kind: str, address: str) -> ep.ProcessingResponse:
    """An answer to a ``kind`` message (request headers or body) setting the destination header (and
    ``envoy.lb`` dynamic metadata) to ``address`` and clearing the route cache."""
    common = ep.CommonResponse(header_mutation=ep.HeaderMutation(set_headers=[_header(DESTINATION_HEADER, address)]),
                               clear_route_cache=True)
    answer = ep.HeadersResponse(response=common) if kind == "request_headers" else ep.BodyResponse(response=common)
    metadata = struct_pb2.Struct()
    metadata.update({"envoy.lb": {DESTINATION_HEADER: address}})
    return ep.ProcessingResponse(**{kind: answer}, dynamic_metadata=metadata)


def streamed(kind: str, body: bytes, end_of_stream: bool) -> ep.ProcessingResponse:
    """An answer to a ``kind`` body message handing ``body`` back to Envoy to forward (``FULL_DUPLEX_STREAMED``)."""
    mutation = ep.BodyMutation(streamed_response=ep.StreamedBodyResponse(body=body, end_of_stream=end_of_stream))
    return ep.ProcessingResponse(**{kind: ep.BodyResponse(response=ep.CommonResponse(body_mutation=mutation))})


def refusal(err: RequestError) -> ep.ProcessingResponse:
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
