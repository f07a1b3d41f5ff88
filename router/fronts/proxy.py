"""The OpenAI-compatible HTTP proxy: ``POST /v1/completions`` and ``/v1/chat/completions``, ``GET /v1/models``.

Per request: check the whole request first — the scheduling headers and the body, within the
:mod:`router.control.limits` (413 for a body too large, 400 with the reason when malformed) — then pick a server
(429 with the admitter's reason when a sheddable request is shed, 503 when there is no server), forward
the body there (:mod:`router.fronts.upstreams`: timeouts, another server when one fails before answering;
:mod:`router.http.forwarding`: request headers), and relay the response — JSON, or the SSE stream chunk by
chunk — while metering TTFT / TPOT / E2E. An answer its server cut short never looks whole, and counts as
the server's failure (:meth:`~router.control.service.RouterService.upstream_failed`): a 200 whose JSON body is not
whole is answered 502, and a stream that breaks, falls silent past the idle limit or ends without its
``[DONE]`` ends with an error event (OpenAI's error shape, code ``upstream_stream_broken``) and no ``[DONE]``. Every dispatch is released on every path. Streaming requests ask
the server for a final ``usage`` chunk so TPOT is measured in tokens. The chosen server is named in the
``x-headroom-server`` response header, beside the server's own headers clients rely on
(:func:`~router.fronts.openai_api.relayed_headers`). Every error the router answers itself, an unknown path
included, has OpenAI's error shape (:mod:`router.fronts.openai_api`). ``GET /v1/models`` lists the models of every
server that answers. ``GET /metrics`` serves the router's Prometheus metrics, ``GET /healthz`` its
liveness, the servers ejected by outlier detection and the requests in flight, and ``GET /readyz`` whether it
should get traffic (with leader election, only the leader: :mod:`router.app.leader`), on the proxy's port or on a
port of their own (:meth:`Proxy.metrics_only`). When the router authenticates its clients, their
``authorization`` header is theirs to the router and is not forwarded to the model servers. The HTTP is
:mod:`router.http.server` towards clients and :mod:`router.http.client` towards the servers.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import msgspec

from headroom.router.control.headers import parse_headers
from headroom.router.control.metering import StreamMeter, meter_json
from headroom.router.control.prompt import parse_body_off_loop
from headroom.router.control.service import Dispatch, RouterService
from headroom.router.errors import AdmissionRejected, InvalidJson, NoCandidates, RequestError, RequestTooLarge
from headroom.router.fronts.openai_api import error_body, merge_models, relayed_headers
from headroom.router.fronts.upstreams import Answer, TotalTimeout, Upstreams, UpstreamTimeouts
from headroom.router.http.client import UpstreamConnection
from headroom.router.http.forwarding import upstream_request_headers
from headroom.router.http.messages import Handler, HttpRequest, Reply, Routes, whole_response

log = logging.getLogger(__name__)

SERVER_HEADER = "x-headroom-server"
MODELS_TIMEOUT_S = 2.0  # each server's share of a /v1/models call
_JSON = msgspec.json.encode
_STREAM_FAILURES: dict[type[OSError], str] = {TimeoutError: "idle-timeout", TotalTimeout: "total-timeout"}


def send(reply: Reply, answer: Answer, headers: dict[str, str] | None = None) -> None:
    reply.send(answer.status, {"content-type": answer.content_type, **(headers or {})}, answer.body)


def send_json(reply: Reply, status: int, document: Any) -> None:
    send(reply, Answer(status, _JSON(document)))


def _unmatched(request: HttpRequest, status: int) -> Handler:
    """404 for an unknown path, 405 for a method the path does not take, in OpenAI's error shape."""
    reason = HTTPStatus(status).phrase

    async def answer(request: HttpRequest, reply: Reply) -> None:
        send(reply, Answer.error(status, reason.lower().replace(" ", "_"), f"{reason}: {request.method} {request.path}"))
    return answer


_REFUSED = {400: "invalid_request", 408: "request_timeout", 431: "request_header_fields_too_large",
            503: "too_many_connections"}


def _failed(status: int, message: str) -> bytes:
    """The answer that ends a connection: a request refused (400, 408, 431), a connection over the limit (503), or
    the router's own failure (500)."""
    answer = Answer.error(status, _REFUSED.get(status, "internal_error"), message)
    return whole_response(status, {"content-type": "application/json"}, answer.body, close=True)


class Proxy:
    def __init__(self, service: RouterService, upstream_timeout_s: float = 600.0, *,
                 timeouts: UpstreamTimeouts | None = None, retries: int = 2, metrics_routes: bool = True,
                 strip_authorization: bool = False, ready: Callable[[], bool] = lambda: True):
        self.service = service
        self.ready = ready
        self.upstreams = Upstreams(service, timeouts or UpstreamTimeouts(total_s=upstream_timeout_s), retries)
        self.metrics_routes = metrics_routes  # /metrics and /healthz on the proxy's port
        # the body always goes on as JSON; the client's credentials to the router stay with the router
        self.not_forwarded = frozenset({"content-type"} | ({"authorization"} if strip_authorization else set()))
        self._ids = map(f"{uuid.uuid4().hex[:12]}-{{}}".format, itertools.count())  # unique across routers

    def routes(self, guard: Callable[[HttpRequest, Reply], bool] | None = None) -> Routes:
        """The proxy's routes (``guard``: e.g. authentication, before any of them)."""
        routes = self._routes(guard)
        routes.add("POST", "/v1/completions", self.completions)
        routes.add("POST", "/v1/chat/completions", self.chat_completions)
        routes.add("GET", "/v1/models", self.models)
        if self.metrics_routes:
            self._add_metrics_routes(routes)
        return routes

    def metrics_only(self) -> Routes:
        """``/metrics``, ``/healthz`` and ``/readyz`` alone, for a port of their own."""
        routes = self._routes(None)
        self._add_metrics_routes(routes)
        return routes

    def _routes(self, guard: Callable[[HttpRequest, Reply], bool] | None) -> Routes:
        return Routes(_unmatched, self.too_large, _failed, guard)

    def _add_metrics_routes(self, routes: Routes) -> None:
        routes.add("GET", "/metrics", self.metrics)
        routes.add("GET", "/healthz", self.healthz)
        routes.add("GET", "/readyz", self.readyz)

    def close(self) -> None:
        self.upstreams.close()

    async def too_large(self, request: HttpRequest, reply: Reply) -> None:
        send(reply, Answer.error(413, "request_too_large", f"request body is over the limit of "
                                 f"{self.service.limits.max_body_bytes} bytes (max_body_bytes)"))

    async def completions(self, request: HttpRequest, reply: Reply) -> None:
        await self._handle(request, reply, chat=False)

    async def chat_completions(self, request: HttpRequest, reply: Reply) -> None:
        await self._handle(request, reply, chat=True)

    async def metrics(self, request: HttpRequest, reply: Reply) -> None:
        self.service.metrics.telemetry_buffered.set(getattr(self.service.telemetry, "buffered", 0))
        send(reply, Answer(200, self.service.metrics.exposition(), "text/plain; charset=utf-8"))

    async def healthz(self, request: HttpRequest, reply: Reply) -> None:
        pool, now = self.service.pool, self.service.monotonic()
        send_json(reply, 200, {"servers": len(pool.servers), "inflight": len(pool.inflight), "ejected": {
            sid: round(until - now, 1) for sid, until in pool.outliers.ejected(now).items()}})

    async def readyz(self, request: HttpRequest, reply: Reply) -> None:
        """200 when this router should get traffic: always, or with leader election only while it leads."""
        ready = self.ready()
        send_json(reply, 200 if ready else 503, {"ready": ready, "servers": len(self.service.pool.servers)})

    async def models(self, request: HttpRequest, reply: Reply) -> None:
        """Every model the servers list; 503 when none answers."""
        servers = list(self.service.pool.servers.values())
        answers = await asyncio.gather(*(self._models_of(spec.address) for spec in servers))
        lists = [models for models in answers if models is not None]
        if not lists:
            send(reply, Answer.error(503, "no_servers", f"none of the {len(servers)} servers listed its models"))
        else:
            send_json(reply, 200, merge_models(lists))

    async def _models_of(self, address: str) -> list[dict[str, Any]] | None:
        response: UpstreamConnection | None = None
        try:
            async with asyncio.timeout(MODELS_TIMEOUT_S):
                response = await self.upstreams.pool.request(address, "GET", "/v1/models", [], b"")
                body = b"".join([chunk async for chunk in self.upstreams.chunks(response)])
            data = msgspec.json.decode(body).get("data") if response.status == 200 else None
        except (OSError, msgspec.DecodeError, AttributeError):
            return None
        finally:
            if response is not None:
                response.release()
        return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else None

    async def _handle(self, request: HttpRequest, reply: Reply, chat: bool) -> None:
        raw = request.body
        try:
            headers = parse_headers(request.headers)
            doc, prompt = await parse_body_off_loop(raw, chat, self.service.limits)
        except RequestTooLarge as err:
            return send(reply, Answer.error(413, "request_too_large", str(err)))
        except InvalidJson as err:
            return send(reply, Answer.error(400, "invalid_json", str(err)))
        except RequestError as err:
            return send(reply, Answer.error(400, "invalid_request", str(err)))
        options = doc.get("stream_options")
        if prompt.stream and not (isinstance(options, dict) and options.get("include_usage") is True):
            raw = _JSON({**doc, "stream_options": {**(options or {}), "include_usage": True}})
        request_id = headers.request_id or next(self._ids)
        try:
            dispatch = await self.service.place(self.service.request_of(request_id, headers, prompt), watched=True)
        except AdmissionRejected as err:
            return send(reply, Answer.error(429, "admission_rejected", err.reason))
        except NoCandidates as err:
            return send(reply, Answer.error(503, "no_servers", str(err)))
        await self._forward(request, reply, dispatch, raw)

    async def _forward(self, request: HttpRequest, reply: Reply, dispatch: Dispatch, body: bytes) -> None:
        """Send the request on and relay the answer; the dispatch is released on every path."""
        forward = upstream_request_headers(request.headers, request.peer, self.not_forwarded)
        forward.append(("content-type", "application/json"))
        released = False
        try:
            opened = await self.upstreams.open(request.path.partition("?")[0], dispatch, body, forward)
            dispatch, upstream, released = opened.dispatch, opened.response, opened.response is None
            if upstream is None:
                assert opened.error is not None
                return send(reply, opened.error, {SERVER_HEADER: dispatch.server.server_id})
            try:
                headers = {**relayed_headers(upstream.headers), SERVER_HEADER: dispatch.server.server_id}
                if upstream.content_type == "text/event-stream" and upstream.status == 200:
                    released = True  # from here on by the relay, on every path
                    return await self._relay_stream(reply, dispatch, upstream, headers, opened.deadline)
                try:
                    body = b"".join([chunk async for chunk in self.upstreams.chunks(upstream, opened.deadline)])
                except OSError as err:  # nothing of it reached the client yet
                    self.service.upstream_failed(dispatch, "body-broken")
                    released = True
                    return send(reply, Answer.error(502, "upstream_error", f"server {dispatch.server.server_id}: "
                                                                            f"{type(err).__name__}: {err}"))
                completion = None
                if upstream.status == 200:
                    completion = meter_json(body, dispatch.dispatch_mono, self.service.monotonic())
                    if completion is None and upstream.content_type in ("application/json", ""):
                        self.service.upstream_failed(dispatch, "body-truncated")  # a 200 whose JSON was cut short
                        released = True
                        return send(reply, Answer.error(502, "upstream_error", f"server {dispatch.server.server_id}: "
                                                        f"its answer is not whole JSON ({len(body)} bytes)"))
                if completion is not None:
                    self.service.complete(dispatch, completion)
                else:
                    self.service.abandon(dispatch, f"upstream-{upstream.status}")
                released = True
                send(reply, Answer(upstream.status, body, upstream.content_type or "application/json"), headers)
            finally:
                upstream.release()
        finally:
            if not released:  # the client went away, or anything else cut the request short
                self.service.abandon(dispatch, "client-disconnected")

    async def _relay_stream(self, reply: Reply, dispatch: Dispatch, upstream: UpstreamConnection,
                            headers: dict[str, str], deadline: float) -> None:
        """Relay an SSE stream chunk by chunk, metered; releases the dispatch on every path."""
        reply.start(200, {"content-type": "text/event-stream", "cache-control": "no-cache", **headers})
        meter = StreamMeter(dispatch.dispatch_mono)
        chunks = self.upstreams.chunks(upstream, deadline)
        broken: str | None = None  # why the server cut the stream short
        try:
            while True:
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                except OSError as err:  # the server's failure, counted; the client gets an error event
                    reason = _STREAM_FAILURES.get(type(err), "stream-broken")
                    self.service.upstream_failed(dispatch, reason)
                    broken = f"{reason}: {type(err).__name__}: {err}"
                    break
                now = self.service.monotonic()
                texts = meter.text_chunks
                if meter.feed(chunk, now):  # once per text event, however the bytes were cut
                    self.service.streamed(dispatch, now, meter.text_chunks - texts)
                await reply.write(chunk)
        except BaseException:  # the client went away (a failed write, or its connection's loss cancelled this)
            self.service.abandon(dispatch, "client-disconnected")
            raise
        finally:
            await chunks.aclose()
        if broken is None and not meter.done:  # the server ended the stream without its [DONE]: cut short too
            self.service.upstream_failed(dispatch, "stream-incomplete")
            broken = "the stream ended before its [DONE]"
        if broken is not None:
            return await _end_broken(reply, meter, dispatch, broken)
        self.service.complete(dispatch, meter.finish(self.service.monotonic()))
        reply.end()


async def _end_broken(reply: Reply, meter: StreamMeter, dispatch: Dispatch, why: str) -> None:
    """End a stream its server broke with an error event (OpenAI's shape; no ``[DONE]``), after ending any event
    the server left half-sent, unless the server sent its own error event."""
    if meter.error is None:
        error = error_body(502, "upstream_stream_broken", f"server {dispatch.server.server_id}: {why}")
        await reply.write((b"\n\n" if meter.partial else b"") + b"data: " + _JSON(error) + b"\n\n")
    reply.end()
