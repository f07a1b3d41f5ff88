"""Envoy's part in front of an endpoint picker, request by request: ask the picker over ext_proc, send the
request to the endpoint it picked, and hand the response back to it as Envoy does.

One :meth:`Envoy.send` is one request in the configuration the Gateway API Inference Extension's Envoy runs
(``FULL_DUPLEX_STREAMED`` bodies both ways): the request headers (with ``x-request-id``) and the body go to the
picker; its answer to the headers names the endpoint (``x-gateway-destination-endpoint``, as GIE's endpoint
picker and headroom's ext_proc both answer); the body it hands back is POSTed there; then the response
headers and every chunk of the response body as it arrives (one message per chunk of a streamed response,
the last with ``end_of_stream``) go back to the picker, which learns from them (its completion hooks:
telemetry, training samples). The picker's answers are read as they come, as Envoy reads them, so nothing
waits on a count of answers. An immediate response from the picker (a refusal) ends the request there.

The picker's ext_proc messages are built as :mod:`benchmarks.ext_proc` builds them.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

DESTINATION = "x-gateway-destination-endpoint"


@dataclass
class Exchange:
    """What happened to one request."""

    endpoint: str | None = None  # host:port the picker chose
    status: int = 0  # the endpoint's HTTP status (0: never sent)
    refused: str | None = None  # the picker's immediate response, if it refused the request
    chunks: int = 0  # response body chunks handed back to the picker
    body: bytes = b""
    answers: list[str] = field(default_factory=list)  # which kinds of answers the picker sent


class Envoy:
    """Plays Envoy between clients, one endpoint picker on ``picker`` (host:port, plaintext) and the endpoints
    it picks (plain HTTP)."""

    def __init__(self, picker: str, *, timeout_s: float = 60.0) -> None:
        self.picker, self.timeout_s = picker, timeout_s
        self._channel: Any = None
        self._stub: Any = None
        self._http: Any = None

    async def __aenter__(self) -> Envoy:
        import aiohttp
        import grpc
        from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

        self._channel = grpc.aio.insecure_channel(self.picker)
        self._stub = ep_grpc.ExternalProcessorStub(self._channel)
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self._http.close()
        await self._channel.close()

    async def send(self, body: dict[str, Any], path: str = "/v1/completions",
                   headers: dict[str, str] | None = None) -> Exchange:
        """One request through the picker to the endpoint it picks; the endpoint's answer handed back."""
        return await asyncio.wait_for(self._send(body, path, headers or {}), self.timeout_s)

    async def _send(self, body: dict[str, Any], path: str, extra: dict[str, str]) -> Exchange:
        from envoy.service.ext_proc.v3 import external_processor_pb2 as ep

        from headroom.router.fronts.ext_proc_answers import FULL_DUPLEX

        exchange, raw = Exchange(), json.dumps(body).encode()
        call = self._stub.Process()
        picked: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        handed_back = bytearray()
        reader = asyncio.create_task(self._read(call, exchange, picked, handed_back))
        try:
            first = ep.ProcessingRequest(request_headers=_headers({
                ":method": "POST", ":path": path, ":authority": "gateway", ":scheme": "http",
                "content-type": "application/json", "x-request-id": str(uuid.uuid4()), **extra}))
            first.protocol_config.request_body_mode = FULL_DUPLEX
            first.protocol_config.response_body_mode = FULL_DUPLEX
            await call.write(first)
            await call.write(ep.ProcessingRequest(request_body=ep.HttpBody(body=raw, end_of_stream=True)))
            exchange.endpoint = await picked
            if exchange.endpoint is None:
                return exchange
            await self._forward(call, exchange, bytes(handed_back) or raw, path)
            await call.done_writing()
            await reader
        finally:
            if not reader.done():
                reader.cancel()
                call.cancel()
        return exchange

    async def _read(self, call: Any, exchange: Exchange, picked: asyncio.Future[str | None],
                    handed_back: bytearray) -> None:
        """Read the picker's answers until it ends the stream. ``picked`` is settled with the endpoint its answer
        to the headers named once the request body it hands back is complete (None: it named none, or refused),
        that body gathered into ``handed_back``."""
        import grpc

        destination = None
        try:
            async for answer in call:
                kind = answer.WhichOneof("response")
                exchange.answers.append(kind)
                if kind == "immediate_response":
                    exchange.refused = f"{answer.immediate_response.status.code} {answer.immediate_response.body!r}"
                    _settle(picked, None)
                elif kind == "request_headers":
                    for option in answer.request_headers.response.header_mutation.set_headers:
                        if option.header.key == DESTINATION:
                            destination = (option.header.raw_value or option.header.value.encode()).decode()
                elif kind == "request_body":
                    mutation = answer.request_body.response.body_mutation
                    handed_back.extend(mutation.streamed_response.body or mutation.body)
                    if mutation.streamed_response.end_of_stream or not mutation.HasField("streamed_response"):
                        _settle(picked, destination)
        except grpc.aio.AioRpcError as err:
            if not picked.done():
                picked.set_exception(err)
        _settle(picked, None)

    async def _forward(self, call: Any, exchange: Exchange, body: bytes, path: str) -> None:
        """POST the request to the endpoint, and hand its response back to the picker as it arrives."""
        from envoy.service.ext_proc.v3 import external_processor_pb2 as ep

        async with self._http.post(f"http://{exchange.endpoint}{path}", data=body,
                                   headers={"content-type": "application/json"}) as response:
            exchange.status = response.status
            await call.write(ep.ProcessingRequest(response_headers=_headers({
                ":status": str(response.status),
                "content-type": response.headers.get("content-type", "application/json")})))
            streamed = response.headers.get("content-type", "").startswith("text/event-stream")
            chunks = response.content.iter_any() if streamed else _whole(response)
            async for chunk in chunks:
                exchange.body += chunk
                exchange.chunks += 1
                await call.write(ep.ProcessingRequest(response_body=ep.HttpBody(body=chunk, end_of_stream=False)))
            await call.write(ep.ProcessingRequest(response_body=ep.HttpBody(body=b"", end_of_stream=True)))


async def _whole(response: Any) -> AsyncIterator[bytes]:
    yield await response.read()


def _settle(future: asyncio.Future[str | None], value: str | None) -> None:
    if not future.done():
        future.set_result(value)


def _headers(pairs: dict[str, str]) -> Any:
    from envoy.config.core.v3 import base_pb2
    from envoy.service.ext_proc.v3 import external_processor_pb2 as ep

    return ep.HttpHeaders(headers=base_pb2.HeaderMap(headers=[
        base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]))
