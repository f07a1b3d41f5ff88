"""The compiled ext_proc front: Envoy's ext_proc gRPC server in Rust (``headroom._native.ExtProcFront``, built
from ``native/`` by ``pip install``) on a thread of its own, with the router's work on the event loop.

The front speaks HTTP/2 and gRPC — TLS and mTLS, the listener's connection, idle and message-size limits — and
the ext_proc protocol of :mod:`router.fronts.ext_proc`: body modes, the request body kept until its end and handed
back, the answers that change nothing, the body-size limit, streams refused or ended. It hands the event loop,
through a socket pair the loop watches (one wake-up for every event pushed meanwhile), one event per request to
schedule and one when its response ends — plus each chunk of a streaming response, to meter — and holds nothing
of Python's while it works. The loop runs what the grpcio servicer runs, through the same
:class:`~router.fronts.ext_proc.Exchange`: the body parsed, the scheduling pipeline, metering, completion and telemetry;
it answers each decision with the servicer's own answer, serialized (once per server address for the routing
answers). A reply for a stream that is gone releases the request at once.

The body of the request is parsed on the loop when small and on a worker thread when over
:data:`~router.control.prompt.OFF_LOOP_BYTES`, as the servicer does. A request whose stream ends before its response
does is abandoned (``ext-proc-stream-ended``), as is one cut by a stop after its grace period.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from headroom.certificates import KeyPair
from headroom.router.control.metering import StreamMeter
from headroom.router.control.prompt import OFF_LOOP_BYTES
from headroom.router.control.service import RouterService
from headroom.router.errors import ConfigError, RequestTooLarge
from headroom.router.fronts.auth import TelemetryTrust
from headroom.router.fronts.ext_proc import (
    HEADER_ONLY,
    MAX_ROUTED_REPLIES,
    Exchange,
    ExtProcServicer,
    prompt_of,
    prompt_off_loop,
)
from headroom.router.fronts.ext_proc_answers import FULL_DUPLEX, refusal

log = logging.getLogger(__name__)


class NativeExtProc:
    """The compiled ext_proc listener over ``service``; ``body_mode`` and ``trust`` as
    :class:`~router.fronts.ext_proc.ExtProcServicer` takes them (the front judges each stream's caller by ``trust``)."""

    def __init__(self, service: RouterService, body_mode: str = "full-duplex", trust: TelemetryTrust | None = None):
        try:
            from headroom import _native
        except ImportError as err:  # a source tree never installed: pip install builds it, or fails
            raise ConfigError("HEADROOM_ROUTER_EXT_PROC_FRONT=native: the compiled ext_proc front (headroom._native) "
                              "is not built; install headroom (it needs cargo and a C compiler), or set "
                              "HEADROOM_ROUTER_EXT_PROC_FRONT=grpcio") from err
        self.native = _native
        self.servicer = ExtProcServicer(service, body_mode)  # request ids and answers, as the grpcio front's
        self.service = service
        self.trust = trust
        self.exchanges: dict[int, Exchange] = {}  # routed requests awaiting their response's end, by token
        self._answers: dict[tuple[str, str], bytes] = {}
        self._front: Any = None
        self._stopped: asyncio.Future[None] | None = None
        self._handlers: dict[int, Callable[..., None]] = {_native.DECIDE: self._decide, _native.TOO_LARGE: self._too_large,
                          _native.FEED: self._feed, _native.FINISH: self._finish, _native.ABANDON: self._abandon,
                          _native.UNAUTHENTICATED: self._unauthenticated, _native.REFUSED: self._refused,
                          _native.STOPPED: self._stop_done}

    def start(self, host: str, port: int, *, pair: KeyPair | None, client_ca: bytes | None, max_connections: int,
              max_message_bytes: int, idle_s: float) -> int:
        """Listen on ``host:port`` (0: a free port) — TLS with ``pair``, client certificates required from
        ``client_ca`` — and take the front's events on the running loop; returns the port."""
        loop = asyncio.get_running_loop()
        # callers judged by the gateway's credentials; not at all without a judge, or where the network proves them
        gateway = self.trust.gateway if self.trust is not None and not self.trust.gateway.network else None
        self._front = self.native.ExtProcFront(
            host, port, max_body_bytes=self.service.limits.max_body_bytes,
            duplex=self.servicer.body_mode == FULL_DUPLEX, max_connections=max_connections,
            max_message_bytes=max_message_bytes, idle_s=idle_s,
            certificate_pem=pair.certificate_pem if pair else None, key_pem=pair.key_pem if pair else None,
            client_ca_pem=client_ca, gateway=gateway is not None,
            gateway_digests=list(gateway.tokens.digests) if gateway and gateway.tokens else [],
            gateway_identities=sorted(gateway.identities) if gateway else [],
            unauthenticated=self.trust is not None and self.trust.unauthenticated)
        self._stopped = loop.create_future()
        loop.add_reader(self._front.fileno(), self._take)
        return int(self._front.port)

    async def stop(self, grace_s: float) -> None:
        """Stop accepting, let streams in progress finish for ``grace_s``, then cut the rest."""
        if self._front is None or self._stopped is None:
            return
        self._front.stop(grace_s)
        await self._stopped
        asyncio.get_running_loop().remove_reader(self._front.fileno())
        self._take()  # the requests of streams cut at the end
        await asyncio.to_thread(self._front.join)

    def _take(self) -> None:
        for event in self._front.take():
            try:
                self._handlers[event[0]](*event[1:])
            except Exception:  # a failure is the request's alone; the front goes on
                log.exception("ext_proc event %r failed", event[:2])
                if event[0] in (self.native.DECIDE, self.native.TOO_LARGE):
                    self._front.fail(event[1], "the router failed to schedule the request")

    def _decide(self, token: int, headers: dict[str, str], body: bytes | None, to_body: bool, trusted: bool,
                response_streamed: bool) -> None:
        exchange = Exchange(self.servicer, trusted)
        exchange.headers, exchange.response_streamed = headers, response_streamed
        kind = "request_body" if to_body else "request_headers"
        if body is None:
            self._answer(token, exchange, kind, exchange.schedule(kind, HEADER_ONLY))
        elif len(body) <= OFF_LOOP_BYTES:
            self._answer(token, exchange, kind, exchange.schedule_body(kind, prompt_of(body, exchange.chat(),
                                                                                        self.service.limits)))
        else:
            asyncio.get_running_loop().create_task(self._decide_large(token, exchange, kind, body))

    async def _decide_large(self, token: int, exchange: Exchange, kind: str, body: bytes) -> None:
        try:
            prompt = await prompt_off_loop(body, exchange.chat(), self.service.limits)
            self._answer(token, exchange, kind, exchange.schedule_body(kind, prompt))
        except Exception:
            log.exception("ext_proc request %d failed", token)
            self._front.fail(token, "the router failed to schedule the request")

    def _answer(self, token: int, exchange: Exchange, kind: str, answer: Any) -> None:
        dispatch = exchange.dispatch
        if dispatch is None:  # refused: an immediate response, which ends the stream
            self._front.answer(token, answer.SerializeToString(), False, False)
            return
        if self._front.answer(token, self._routed(kind, dispatch.server.address), True, dispatch.request.stream):
            self.exchanges[token] = exchange
        else:  # its stream ended while it was being scheduled
            exchange.close()

    def _routed(self, kind: str, address: str) -> bytes:
        answer = self._answers.get((kind, address))
        if answer is None:
            if len(self._answers) >= MAX_ROUTED_REPLIES:
                self._answers.clear()
            answer = self._answers[kind, address] = self.servicer.routed(kind, address).SerializeToString()
        return answer

    def _too_large(self, token: int, size: int) -> None:
        """The front found a request body of ``size`` bytes over the service's limit, which it was given."""
        try:
            self.service.limits.check_body_size(size)
        except RequestTooLarge as err:
            self._front.answer(token, refusal(err).SerializeToString(), False, False)
        else:
            self._front.fail(token, f"a request body of {size} bytes is within the limit")

    def _feed(self, token: int, data: bytes) -> None:
        exchange = self.exchanges.get(token)
        if exchange is not None and exchange.dispatch is not None:
            if exchange.meter is None:
                exchange.meter = StreamMeter(exchange.dispatch.dispatch_mono)
            exchange.meter_body(data, False)

    def _finish(self, token: int, sse: bool, json_answer: bool, json_body: bytes) -> None:
        exchange = self.exchanges.pop(token, None)
        if exchange is None or exchange.dispatch is None:
            return
        exchange.json_answer = json_answer
        if sse and exchange.meter is None:
            exchange.meter = StreamMeter(exchange.dispatch.dispatch_mono)
        if not sse:
            exchange.json_body = json_body
        exchange.finish()

    def _abandon(self, token: int) -> None:
        exchange = self.exchanges.pop(token, None)
        if exchange is not None:
            exchange.close()

    def _unauthenticated(self) -> None:
        self.service.metrics.child(self.service.metrics.unauthenticated, "ext_proc").inc()

    def _refused(self, reason: str) -> None:
        log.error("ext_proc stream refused: %s", reason)

    def _stop_done(self) -> None:
        if self._stopped is not None and not self._stopped.done():
            self._stopped.set_result(None)
