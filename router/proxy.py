"""The OpenAI-compatible HTTP proxy: ``POST /v1/completions`` and ``/v1/chat/completions``, ``GET /v1/models``.

Per request: parse the scheduling headers and the body (400 with the reason when malformed), pick a
server (429 with the admitter's reason when a sheddable request is shed, 503 when there is no server),
forward the body there, and relay the response — JSON, or the SSE stream chunk by chunk — while metering
TTFT / TPOT / E2E. Streaming requests ask the server for a final ``usage`` chunk so TPOT is measured in
tokens. The chosen server is named in the ``x-headroom-server`` response header, beside the server's own
headers clients rely on (:func:`~router.openai_api.relayed_headers`). Every error the router answers
itself, an unknown path included, has OpenAI's error shape (:mod:`router.openai_api`). ``GET /v1/models``
lists the models of every server that answers. ``GET /metrics`` serves the router's Prometheus metrics
and ``GET /healthz`` its liveness, on the proxy's port or on an app of their own
(:meth:`Proxy.metrics_app`). When the router authenticates its clients, their ``authorization`` header is
theirs to the router and is not forwarded to the model servers.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import msgspec
from aiohttp import web

from headroom.router.errors import AdmissionRejected, NoCandidates, RequestError
from headroom.router.headers import parse_headers
from headroom.router.metering import StreamMeter, meter_json
from headroom.router.openai_api import error_body, merge_models, relayed_headers
from headroom.router.prompt import read_body
from headroom.router.service import Dispatch, RouterService

log = logging.getLogger(__name__)

SERVER_HEADER = "x-headroom-server"
_HOP_BY_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "accept-encoding"}


MODELS_TIMEOUT_S = 2.0  # each server's share of a /v1/models call


def error_response(status: int, code: str, message: str) -> web.Response:
    return web.json_response(error_body(status, code, message), status=status)


@web.middleware
async def openai_errors(request: web.Request,
                        handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """aiohttp's own errors (unknown path, wrong method, body too large) in OpenAI's error shape."""
    try:
        return await handler(request)
    except web.HTTPException as err:
        if err.status < 400:
            raise
        message = f"{err.reason}: {request.method} {request.path}" if err.status in (404, 405) else err.reason
        return error_response(err.status, err.reason.lower().replace(" ", "_"), message)


class Proxy:
    def __init__(self, service: RouterService, upstream_timeout_s: float = 600.0, *, metrics_routes: bool = True,
                 strip_authorization: bool = False):
        self.service = service
        self.upstream_timeout_s = upstream_timeout_s
        self.metrics_routes = metrics_routes  # /metrics and /healthz on the proxy's app
        self.hop_by_hop = _HOP_BY_HOP | ({"authorization"} if strip_authorization else set())
        self.session: aiohttp.ClientSession | None = None
        self._ids = map(f"{uuid.uuid4().hex[:12]}-{{}}".format, itertools.count())  # unique across routers

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=[openai_errors])
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/v1/models", self.models)
        if self.metrics_routes:
            self._add_metrics_routes(app)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    def metrics_app(self) -> web.Application:
        """``/metrics`` and ``/healthz`` alone, for a port of their own."""
        app = web.Application()
        self._add_metrics_routes(app)
        return app

    def _add_metrics_routes(self, app: web.Application) -> None:
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/healthz", self.healthz)

    async def _open(self, app: web.Application) -> None:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
        self.session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                             timeout=aiohttp.ClientTimeout(total=self.upstream_timeout_s))

    async def _close(self, app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, chat=True)

    async def metrics(self, request: web.Request) -> web.Response:
        self.service.metrics.telemetry_buffered.set(getattr(self.service.telemetry, "buffered", 0))
        return web.Response(body=self.service.metrics.exposition(), content_type="text/plain", charset="utf-8")

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"servers": len(self.service.pool.servers)})

    async def models(self, request: web.Request) -> web.Response:
        """Every model the servers list; 503 when none answers."""
        servers = list(self.service.pool.servers.values())
        answers = await asyncio.gather(*(self._models_of(spec.address) for spec in servers))
        lists = [models for models in answers if models is not None]
        if not lists:
            return error_response(503, "no_servers", f"none of the {len(servers)} servers listed its models")
        return web.json_response(merge_models(lists))

    async def _models_of(self, address: str) -> list[dict[str, Any]] | None:
        assert self.session is not None
        try:
            async with self.session.get(f"http://{address}/v1/models",
                                        timeout=aiohttp.ClientTimeout(total=MODELS_TIMEOUT_S)) as response:
                if response.status != 200:
                    return None
                data = (await response.json(content_type=None)).get("data")
        except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError):
            return None
        return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else None

    async def _handle(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await request.read()
            doc = msgspec.json.decode(body)
            headers = parse_headers(request.headers.items())
            prompt = read_body(doc, chat)
        except ValueError as err:
            return error_response(400, "invalid_json", f"request body is not valid JSON: {err}")
        except RequestError as err:
            return error_response(400, "invalid_request", str(err))
        request_id = headers.request_id or next(self._ids)
        try:
            dispatch = self.service.pick(self.service.request_of(request_id, headers, prompt))
        except AdmissionRejected as err:
            return error_response(429, "admission_rejected", err.reason)
        except NoCandidates as err:
            return error_response(503, "no_servers", str(err))
        options = doc.get("stream_options")
        if prompt.stream and not (isinstance(options, dict) and options.get("include_usage") is True):
            body = msgspec.json.encode({**doc, "stream_options": {**(options or {}), "include_usage": True}})
        return await self._forward(request, dispatch, body)

    async def _forward(self, request: web.Request, dispatch: Dispatch, body: bytes) -> web.StreamResponse:
        assert self.session is not None
        url = f"http://{dispatch.server.address}{request.path}"
        forward = {k: v for k, v in request.headers.items() if k.lower() not in self.hop_by_hop}
        forward["content-type"] = "application/json"
        finished = False
        try:
            async with self.session.post(url, data=body, headers=forward) as upstream:
                headers = {**relayed_headers(upstream.headers.items()), SERVER_HEADER: dispatch.server.server_id}
                if upstream.status != 200:
                    body = await upstream.read()
                    self.service.abandon(dispatch, f"upstream-{upstream.status}")
                    finished = True
                    return web.Response(body=body, status=upstream.status,
                                        content_type=upstream.content_type or "application/json", headers=headers)
                if upstream.content_type == "text/event-stream":
                    response = await self._relay_stream(request, dispatch, upstream, headers)
                else:
                    body = await upstream.read()
                    self.service.complete(dispatch, meter_json(body, dispatch.dispatch_mono, self.service.monotonic()))
                    response = web.Response(body=body, status=200, content_type=upstream.content_type,
                                            headers=headers)
                finished = True
                return response
        except (aiohttp.ClientError, TimeoutError) as err:
            self.service.abandon(dispatch, "upstream-connection")
            finished = True
            return error_response(502, "upstream_unreachable", f"server {dispatch.server.server_id}: {type(err).__name__}: {err}")
        finally:
            if not finished:  # the client went away mid-stream
                self.service.abandon(dispatch, "client-disconnected")

    async def _relay_stream(self, request: web.Request, dispatch: Dispatch, upstream: aiohttp.ClientResponse,
                            headers: dict[str, str]) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"content-type": "text/event-stream",
                                                            "cache-control": "no-cache", **headers})
        await response.prepare(request)
        meter = StreamMeter(dispatch.dispatch_mono)
        try:
            async for chunk in upstream.content.iter_any():
                now = self.service.monotonic()
                if meter.feed(chunk, now):
                    self.service.streamed(dispatch, now)
                await response.write(chunk)
        except (aiohttp.ClientError, TimeoutError):
            self.service.abandon(dispatch, "upstream-stream-broken")
            return response
        self.service.complete(dispatch, meter.finish(self.service.monotonic()))
        await response.write_eof()
        return response
