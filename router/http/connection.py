"""One client's connection to the router's HTTP server (:mod:`router.http.server`): asyncio protocol callbacks
and httptools' C parser, for the proxy's hot path.

Requests are parsed as bytes arrive and answered one at a time in the order they came (keep-alive and
pipelining), each once the client has taken the answer before it, by a handler ``async (HttpRequest, Reply) ->
None`` looked up by path and method (:mod:`router.http.messages`). A reply is a whole body or a chunked
stream (unchunked to an HTTP/1.0 client, ending with the connection), with the transport's flow control; a
client that asks for ``100 Continue`` before it sends a body gets it. A body over the server's ``max_body``
bytes (announced or counted) is answered by the :attr:`Routes.too_large` handler at once, and the rest of it
is read and dropped for up to ``LINGER_S`` before the connection closes (a client still sending would
otherwise see a reset instead of the answer). A request whose line and headers (or trailers, which are never
taken as headers) are over the server's limits is refused with 431, one httptools cannot parse or asking for
an upgrade with 400, and the connection closes. A client that goes away cancels its handler, so whatever it
held is released at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

import httptools

from headroom.router.http.messages import HttpRequest, Reply, Routes

if TYPE_CHECKING:
    from headroom.router.http.server import HttpServer

log = logging.getLogger(__name__)

LINGER_S = 10.0  # reading the rest of a refused body
MAX_PENDING = 32  # pipelined requests parsed ahead of their answers; reading pauses beyond
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Connection(asyncio.Protocol):
    """One client's connection: parses its requests as bytes arrive, within the server's limits on a request's
    head, body and time, and answers them one at a time in order (:meth:`_serve`)."""

    def __init__(self, routes: Routes, server: HttpServer):
        self.routes, self.server = routes, server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.peer: str | None = None
        self.pending: deque[HttpRequest] = deque()
        self.task: asyncio.Task[None] | None = None
        self.closing = self.dropping = False  # dropping: the rest of a body over the limit
        self.paused = False  # reading paused by the server (MAX_PENDING): a request cut meanwhile is not late
        self.refused: bytes | None = None  # reading stopped: the answer that ends the connection (b"": none)
        self.began: float | None = None  # when the request arriving now began
        self._url = b""
        self._headers: list[tuple[str, str]] = []
        self._body: list[bytes] = []
        self._size = self._head_size = self._header_count = 0
        self._in_head = self._head_done = False  # bytes are counted against max_head_bytes while in the head
        self._drained: asyncio.Future[None] | None = None
        self.stalled: float | None = None  # since when the client has taken nothing of its answers
        self._unsent = 0  # the answers' bytes waiting for the client then
        self.active = server.loop.time()  # when bytes last came in, an answer ended or the close began
        self.asked = False  # a request began on it

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are no asyncio.Transport
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if isinstance(peer, tuple) else None
        if len(self.server.connections) >= self.server.max_connections:
            self.refused = b""  # nothing of it is read
            self.closing = True
            self.write(self.routes.failed(503, f"the router holds its limit of {self.server.max_connections} "
                                               "connections (maxConnections): try again later"))
            transport.close()
            if self.server.on_refused is not None:
                self.server.on_refused()
            return
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
        if self._in_head:  # a guard while the head is incomplete (exact once complete: on_headers_complete)
            self._head_size += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.refuse(400, "upgrades are not supported")
        except httptools.HttpParserError as err:
            self.refuse(400, f"malformed HTTP request: {err}")
        else:
            self._check_head()

    def _check_head(self) -> None:
        """431 once the request's line and headers (or its trailers) are over the server's limits."""
        server = self.server
        if self._in_head and (self._head_size > server.max_head_bytes or self._header_count > server.max_headers):
            self.refuse(431, f"the request's headers are over the limit of {server.max_head_bytes} bytes "
                             f"or {server.max_headers} headers")

    def refuse(self, status: int, message: str) -> None:
        """Stop reading: answer what came before, then ``status`` with ``message``, and close."""
        if self.refused is None:
            self.refused, self.began = self.routes.failed(status, message), None
            if self.idle:
                self.task = self.server.loop.create_task(self._serve())

    # httptools callbacks
    def on_message_begin(self) -> None:
        self.asked = True
        self._url, self._headers, self._body, self._size = b"", [], [], 0
        self._head_size = self._header_count = 0
        self._in_head, self._head_done = True, False
        self.began = self.server.loop.time()

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._head_done:  # a chunked body's trailer: counted against the limits, never a request header
            self._in_head = True
            return
        self._headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        """A body announced over ``max_body`` is refused at once; a client waiting for ``100 Continue`` before
        it sends the body gets it, when nothing is answered on its connection before. The head's exact size."""
        self._head_size = len(self.parser.get_method()) + len(self._url) + 14 + \
            sum(len(name) + len(value) + 4 for name, value in self._headers)  # request line, headers, CRLFs
        self._check_head()
        self._in_head, self._head_done = False, True
        if self.refused is not None:
            return
        lengths = [value for name, value in self._headers if name.lower() == "content-length"]
        if lengths and lengths[0].strip().isdigit() and int(lengths[0]) > self.server.max_body:
            self._too_large()
        elif self.idle and not self.pending and any(name.lower() == "expect" and value.lower() == "100-continue"
                                                    for name, value in self._headers):
            self.write(CONTINUE)

    def on_body(self, body: bytes) -> None:
        if self.dropping:
            return
        self._size += len(body)
        if self._size > self.server.max_body:
            self._too_large()
        else:
            self._body.append(body)

    def _too_large(self) -> None:
        """Answered now; the rest of the body is read and dropped for ``LINGER_S`` at most."""
        self.dropping = True
        self._enqueue(b"", too_large=True)
        self.server.loop.call_later(LINGER_S, self.close)

    def on_message_complete(self) -> None:
        self._in_head, self.began = False, None
        if self.parser.should_upgrade():
            self.refuse(400, "upgrades are not supported")
        elif self.dropping:
            self.refused = b""  # nothing more is read; the connection closes after the answer
            if self.idle:
                self.close()
        else:
            self._enqueue(b"".join(self._body))

    def _enqueue(self, body: bytes, too_large: bool = False) -> None:
        if self.refused is not None:
            return  # pipelined behind a request that ends the connection
        method = self.parser.get_method().decode("latin-1")
        keep_alive = self.parser.should_keep_alive() and not too_large
        self.pending.append(HttpRequest(method, self._url.decode("latin-1"), self._headers, body, self.peer,
                                    keep_alive, too_large, self.parser.get_http_version() == "1.0"))
        if len(self.pending) > MAX_PENDING and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        if self.idle:
            self.task = self.server.loop.create_task(self._serve())

    async def _serve(self) -> None:
        while self.pending and not self.closing:
            request = self.pending.popleft()
            if len(self.pending) == MAX_PENDING and self.transport is not None:
                self.paused = False
                self.began = self.began and self.server.loop.time()  # a request cut meanwhile: its time runs from now
                self.transport.resume_reading()
            reply = Reply(self, not request.keep_alive or self.server.closing, chunked=not request.http10,
                          bodiless=request.method == "HEAD")
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
            self.write(self.refused)
            self._linger()
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
        self.stalled, self._unsent = self.server.loop.time(), self._buffered()

    def resume_writing(self) -> None:
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = self.stalled = None

    def stalled_for(self, now: float) -> float:
        """How long, as of the last call, the client has taken none of the answers' bytes waiting to be sent (0
        while writing is not paused); a call that finds fewer bytes waiting starts the clock again."""
        if self.stalled is None:
            return 0.0
        unsent = self._buffered()
        if unsent < self._unsent:  # it read some: the clock starts again
            self.stalled, self._unsent = now, unsent
        return now - self.stalled

    def _buffered(self) -> int:
        return self.transport.get_write_buffer_size() if self.transport is not None else 0

    def _linger(self) -> None:
        """Close after the last answer: at once when it can, else for a client maybe still sending, the end of
        the answer first, and the connection after ``LINGER_S`` (closing with its bytes unread would reset the
        connection, and the answer with it)."""
        if self.transport is None or self.closing or not self.refused or not self.transport.can_write_eof():
            self.close()
        else:
            self.transport.write_eof()
            self.server.loop.call_later(LINGER_S, self.abort)

    def close(self) -> None:
        """Close once the client has read what was written (:meth:`abort` if it has not within ``keep_alive_s``)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
            self.active = self.server.loop.time()

    @property
    def closed(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def abort(self) -> None:
        """Close now, with whatever the client has not read dropped (a close waits for it to read)."""
        if self.transport is not None:
            self.transport.abort()
