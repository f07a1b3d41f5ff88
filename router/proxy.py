"""The OpenAI-compatible HTTP proxy: ``POST /v1/completions`` and ``/v1/chat/completions``, ``GET /v1/models``.

Per request: check the whole request first — the scheduling headers and the body, within the
:mod:`router.limits` (413 for a body too large, 400 with the reason when malformed) — then pick a server
(429 with the admitter's reason when a sheddable request is shed, 503 when there is no server), forward
the body there (:mod:`router.upstreams`: timeouts, another server when one fails before answering;
:mod:`router.forwarding`: request headers), and relay the response — JSON, or the SSE stream chunk by
chunk — while metering TTFT / TPOT / E2E. Every dispatch is released on every path. Streaming requests ask
the server for a final ``usage`` chunk so TPOT is measured in tokens. The chosen server is named in the
``x-headroom-server`` response header, beside the server's own headers clients rely on
(:func:`~router.openai_api.relayed_headers`). Every error the router answers itself, an unknown path
included, has OpenAI's error shape (:mod:`router.openai_api`). ``GET /v1/models`` lists the models of every
server that answers. ``GET /metrics`` serves the router's Prometheus metrics, ``GET /healthz`` its
liveness, the servers ejected by outlier detection and the requests in flight, and ``GET /readyz`` whether it
should get traffic (with leader election, only the leader: :mod:`router.leader`), on the proxy's port or on an
app of their own (:meth:`Proxy.metrics_app`). When the router authenticates its clients, their
``authorization`` header is theirs to the router and is not forwarded to the model servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import msgspec
from aiohttp import web

from headroom.router.errors import AdmissionRejected, InvalidJson, NoCandidates, RequestError, RequestTooLarge
from headroom.router.forwarding import upstream_request_headers
from headroom.router.headers import parse_headers
from headroom.router.metering import StreamMeter, meter_json
from headroom.router.openai_api import error_body, merge_models, relayed_headers
from headroom.router.prompt import parse_body_off_loop
from headroom.router.service import Dispatch, RouterService
from headroom.router.upstreams import Upstreams, UpstreamTimeouts

log = logging.getLogger(__name__)

SERVER_HEADER = "x-headroom-server"


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
    def __init__(self, service: RouterService, upstream_timeout_s: float = 600.0, *,
                 timeouts: UpstreamTimeouts | None = None, retries: int = 2, metrics_routes: bool = True,
                 strip_authorization: bool = False, ready: Callable[[], bool] = lambda: True):
        self.service = service
        self.ready = ready
        self.upstreams = Upstreams(service, timeouts or UpstreamTimeouts(total_s=upstream_timeout_s), retries)
        self.metrics_routes = metrics_routes  # /metrics and /healthz on the proxy's app
        self.not_forwarded = frozenset({"authorization"} if strip_authorization else ())
        self.session: aiohttp.ClientSession | None = None
        self._ids = map(f"{uuid.uuid4().hex[:12]}-{{}}".format, itertools.count())  # unique across routers

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.service.limits.max_body_bytes, middlewares=[openai_errors])
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
        app.router.add_get("/readyz", self.readyz)

    async def _open(self, app: web.Application) -> None:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
        self.session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                             timeout=self.upstreams.timeouts.client_timeout())

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
        pool, now = self.service.pool, self.service.monotonic()
        return web.json_response({"servers": len(pool.servers), "inflight": len(pool.inflight),
                                  "ejected": {sid: round(until - now, 1) for sid, until in pool.outliers.ejected(now).items()}})

    async def readyz(self, request: web.Request) -> web.Response:
        """200 when this router should get traffic: always, or with leader election only while it leads."""
        ready = self.ready()
        return web.json_response({"ready": ready, "servers": len(self.service.pool.servers)},
                                 status=200 if ready else 503)

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
            raw = await request.read()
            headers = parse_headers(request.headers.items())
            doc, prompt = await parse_body_off_loop(raw, chat, self.service.limits)
        except web.HTTPRequestEntityTooLarge as err:
            return error_response(413, "request_too_large", f"request body is over the limit of "
                                  f"{self.service.limits.max_body_bytes} bytes (max_body_bytes): {err.text}")
        except RequestTooLarge as err:
            return error_response(413, "request_too_large", str(err))
        except InvalidJson as err:
            return error_response(400, "invalid_json", str(err))
        except RequestError as err:
            return error_response(400, "invalid_request", str(err))
        options = doc.get("stream_options")
        if prompt.stream and not (isinstance(options, dict) and options.get("include_usage") is True):
            raw = msgspec.json.encode({**doc, "stream_options": {**(options or {}), "include_usage": True}})
        request_id = headers.request_id or next(self._ids)
        try:
            dispatch = self.service.pick(self.service.request_of(request_id, headers, prompt))
        except AdmissionRejected as err:
            return error_response(429, "admission_rejected", err.reason)
        except NoCandidates as err:
            return error_response(503, "no_servers", str(err))
        return await self._forward(request, dispatch, raw)

    async def _forward(self, request: web.Request, dispatch: Dispatch, body: bytes) -> web.StreamResponse:
        """Send the request on and relay the answer; the dispatch is released on every path."""
        assert self.session is not None
        forward = upstream_request_headers(request.headers, request.remote, self.not_forwarded)
        forward["content-type"] = "application/json"
        released = False
        try:
            opened = await self.upstreams.open(self.session, request.path, dispatch, body, forward)
            dispatch, upstream, released = opened.dispatch, opened.response, opened.response is None
            if upstream is None:
                assert opened.error is not None
                opened.error.headers[SERVER_HEADER] = dispatch.server.server_id
                return opened.error
            try:
                headers = {**relayed_headers(upstream.headers.items()), SERVER_HEADER: dispatch.server.server_id}
                if upstream.content_type == "text/event-stream" and upstream.status == 200:
                    response = await self._relay_stream(request, dispatch, upstream, headers)
                    released = True
                    return response
                try:
                    body = b"".join([chunk async for chunk in self.upstreams.chunks(upstream)])
                except (aiohttp.ClientError, TimeoutError) as err:  # nothing of it reached the client yet
                    self.service.upstream_failed(dispatch, "body-broken")
                    released = True
                    return error_response(502, "upstream_error", f"server {dispatch.server.server_id}: "
                                                                 f"{type(err).__name__}: {err}")
                if upstream.status == 200:
                    self.service.complete(dispatch, meter_json(body, dispatch.dispatch_mono, self.service.monotonic()))
                else:
                    self.service.abandon(dispatch, f"upstream-{upstream.status}")
                released = True
                return web.Response(body=body, status=upstream.status, headers=headers,
                                    content_type=upstream.content_type or "application/json")
            finally:
                upstream.release()
        finally:
            if not released:  # the client went away, or anything else cut the request short
                self.service.abandon(dispatch, "client-disconnected")

    async def _relay_stream(self, request: web.Request, dispatch: Dispatch, upstream: aiohttp.ClientResponse,
                            headers: dict[str, str]) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={"content-type": "text/event-stream",
                                                            "cache-control": "no-cache", **headers})
        await response.prepare(request)
        meter = StreamMeter(dispatch.dispatch_mono)
        chunks = self.upstreams.chunks(upstream)
        while True:
            try:
                chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except (aiohttp.ClientError, TimeoutError) as err:
                self.service.upstream_failed(dispatch, "idle-timeout" if isinstance(err, TimeoutError)
                                             else "stream-broken")
                return response
            now = self.service.monotonic()
            if meter.feed(chunk, now):
                self.service.streamed(dispatch, now)
            await response.write(chunk)  # a client gone raises: the caller releases the dispatch
        self.service.complete(dispatch, meter.finish(self.service.monotonic()))
        with contextlib.suppress(ConnectionError):  # the client left after the last byte: it was served
            await response.write_eof()
        return response
