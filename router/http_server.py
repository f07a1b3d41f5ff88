"""The router's HTTP/1.1 server: asyncio protocols and httptools' C parser, for the proxy's hot path.

One :class:`Connection` per client. Requests are parsed as bytes arrive and answered one at a time in the
order they came (keep-alive and pipelining), by a handler ``async (Request, Reply) -> None`` looked up by
path and method (:mod:`router.http_messages`). A reply is a whole body or a chunked stream (unchunked to an
HTTP/1.0 client, ending with the connection), with the transport's flow control; a client that asks for
``100 Continue`` before it sends a body gets it. A body over ``max_body`` bytes is answered by the
:attr:`Routes.too_large` handler at once, and the rest of it is read and dropped for up to ``LINGER_S``
before the connection closes (a client still sending would otherwise see a reset instead of the answer); a
request httptools cannot parse gets a 400 and the connection closes. A client that goes away cancels its
handler, so whatever it held is released at once; a connection idle for ``keep_alive_s`` is closed.
:meth:`HttpServer.close` stops accepting, closes idle connections, and gives the requests in progress
``grace_s`` to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections import deque

import httptools

from headroom.router.http_messages import Reply, Request, Routes

log = logging.getLogger(__name__)

LINGER_S = 10.0  # reading the rest of a refused body
KEEP_ALIVE_S = 75.0  # a client connection with nothing asked or answered for this long is closed
MAX_PENDING = 32  # pipelined requests parsed ahead of their answers; reading pauses beyond
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Connection(asyncio.Protocol):
    def __init__(self, routes: Routes, max_body: int, server: HttpServer):
        self.routes, self.max_body, self.server = routes, max_body, server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self.pending: deque[Request] = deque()
        self.task: asyncio.Task[None] | None = None
        self.closing = self.dropping = False  # dropping: the rest of a body over the limit
        self.refused: str | None = None  # reading stopped: "" after a body over the limit, else why
        self._url = b""
        self._headers: list[tuple[str, str]] = []
        self._body: list[bytes] = []
        self._size = 0
        self._drained: asyncio.Future[None] | None = None
        self.active = server.loop.time()  # when bytes last came in or an answer ended

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are no asyncio.Transport
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else None
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.connections.discard(self)
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)  # drain wakes and finds the connection closing
        if self.task is not None and not self.task.done():
            self.task.cancel()  # the handler releases what it holds

    def data_received(self, data: bytes) -> None:
        self.active = self.server.loop.time()
        if self.refused is not None:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse("upgrades are not supported")
        except httptools.HttpParserError as err:
            self._refuse(f"malformed HTTP request: {err}")

    def _refuse(self, message: str) -> None:
        """Stop reading: answer what came before, then a 400 with ``message``, and close."""
        self.refused = message
        if self.idle:
            self.task = self.server.loop.create_task(self._serve())

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url, self._headers, self._body, self._size = b"", [], [], 0

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        """A client waiting for ``100 Continue`` before it sends the body gets it, when nothing is answered on its
        connection before."""
        if self.idle and not self.pending and any(name.lower() == "expect" and value.lower() == "100-continue"
                                                  for name, value in self._headers):
            self.write(CONTINUE)

    def on_body(self, body: bytes) -> None:
        if self.dropping:
            return
        self._size += len(body)
        if self._size > self.max_body:
            self.dropping = True  # answered now; the rest is read and dropped for LINGER_S at most
            self._enqueue(b"", too_large=True)
            self.server.loop.call_later(LINGER_S, self.close)
        else:
            self._body.append(body)

    def on_message_complete(self) -> None:
        if self.dropping:
            self.refused = ""  # nothing more is read; the connection closes after the answer
            if self.idle:
                self.close()
        else:
            self._enqueue(b"".join(self._body))

    def _enqueue(self, body: bytes, too_large: bool = False) -> None:
        method = self.parser.get_method().decode("latin-1")
        keep_alive = self.parser.should_keep_alive() and not too_large
        self.pending.append(Request(method, self._url.decode("latin-1"), self._headers, body, self.peer,
                                    keep_alive, too_large, self.parser.get_http_version() == "1.0"))
        if len(self.pending) > MAX_PENDING and self.transport is not None:
            self.transport.pause_reading()
        if self.idle:
            self.task = self.server.loop.create_task(self._serve())

    async def _serve(self) -> None:
        while self.pending and not self.closing:
            request = self.pending.popleft()
            if len(self.pending) == MAX_PENDING and self.transport is not None:
                self.transport.resume_reading()
            reply = Reply(self, not request.keep_alive or self.server.closing, chunked=not request.http10)
            try:
                if self.routes.guard is None or self.routes.guard(request, reply):
                    await self.routes.handler(request)(request, reply)
                await self.drain()  # the next answer waits until the client takes this one
            except ConnectionError:  # the client went away
                self.close()
                return
            except Exception:
                log.exception("%s %s failed", request.method, request.path)
                if not reply.started:
                    self.write(self.routes.failed(500, "the router failed to answer"))
                self.close()
                return
            if request.too_large and self.refused is None:
                return  # the body is still arriving: dropped until it ends or LINGER_S
            if not reply.done or reply.closes:  # a stream cut short cannot be followed by another answer
                self.close()
                return
        if self.refused is not None:
            if self.refused:
                self.write(self.routes.failed(400, self.refused))
            self.close()
        self.active = self.server.loop.time()

    @property
    def idle(self) -> bool:
        return self.task is None or self.task.done()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    async def drain(self) -> None:
        """Wait until the transport's buffer is low; :class:`ConnectionResetError` when the client is gone."""
        if self._drained is not None and not self.closing:
            await self._drained
        if self.closing:
            raise ConnectionResetError("the client closed the connection")

    def pause_writing(self) -> None:
        self._drained = self.server.loop.create_future()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class HttpServer:
    def __init__(self, routes: Routes, max_body: int, keep_alive_s: float = KEEP_ALIVE_S):
        self.routes, self.max_body, self.keep_alive_s = routes, max_body, keep_alive_s
        self.loop = asyncio.get_running_loop()
        self.connections: set[Connection] = set()
        self.closing = False
        self._server: asyncio.Server | None = None
        self._sweep = self.loop.call_later(keep_alive_s / 4, self._close_idle)

    def _close_idle(self) -> None:
        """Close the connections idle for ``keep_alive_s`` (one timer for all, not one per request)."""
        since = self.loop.time() - self.keep_alive_s
        for connection in [c for c in self.connections if c.idle and c.active < since]:
            connection.close()
        self._sweep = self.loop.call_later(self.keep_alive_s / 4, self._close_idle)

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        """Listen on ``host:port`` (0: any free port); returns the port."""
        self._server = await self.loop.create_server(lambda: Connection(self.routes, self.max_body, self),
                                                     host, port, ssl=tls, reuse_address=True)
        bound: int = self._server.sockets[0].getsockname()[1]
        return bound

    async def close(self, grace_s: float) -> None:
        """Stop accepting; idle connections close now, busy ones after their answer or ``grace_s``."""
        self.closing = True
        self._sweep.cancel()
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            if connection.idle:
                connection.close()
        busy = [c.task for c in self.connections if c.task is not None and not c.task.done()]
        if busy:
            _, late = await asyncio.wait(busy, timeout=grace_s)
            for task in late:
                task.cancel()
        for connection in list(self.connections):
            connection.close()
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
