"""The proxy's HTTP/1.1 client to the model servers: asyncio protocols, httptools' C parser, and pooled
keep-alive connections per server.

:meth:`UpstreamPool.request` sends a request on an idle connection to the server, or a new one (within
``connect_s``; failing that, :class:`ConnectFailed`), and returns the :class:`UpstreamConnection` once its
status line and headers are in. Its body is read chunk by chunk as it arrives (:meth:`UpstreamConnection.read`,
``b""`` at its end, :class:`ConnectionError` when the connection breaks first); a reader that falls behind
pauses the socket. :meth:`UpstreamConnection.release` returns the connection to the pool when the answer was
read to its end and the server keeps the connection alive, and closes it otherwise. A body without length
or chunks ends when the server closes the connection cleanly (a reset breaks it). A connection the server
closes while idle leaves the pool; one idle for ``idle_s`` is closed, and a reused one the server closed
within ``RESEND_WINDOW_S`` of the request, before it answered, is replaced by a new one, once (the server
closed it idle as the request went out: it never saw it). Closed any later, the server may have acted on the
request, so it is a failure, not sent again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

import httptools

HIGH_WATER = 256 * 1024  # bytes of body buffered before the socket is paused
MAX_IDLE = 256  # idle connections kept per server
RESEND_WINDOW_S = 0.25  # a reused connection lost this soon after a request lost it to the keep-alive close race
# (a few ms on the wire; the margin is for a busy event loop seeing the close late)


class ConnectFailed(ConnectionError):
    """No connection to the server could be made (refused, unreachable, or not within ``connect_s``)."""


class UpstreamConnection(asyncio.Protocol):
    """One pooled connection to a server, carrying one request and its response at a time: the response's
    status, headers and body as they arrive. Bytes after the response's end (a second response nobody asked
    for) break the connection: they are ignored and it is never pooled again."""

    def __init__(self, pool: UpstreamPool, address: str):
        self.pool, self.address = pool, address
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.status = 0
        self.headers: list[tuple[str, str]] = []
        self.content_type = ""
        self._head: asyncio.Future[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._paused = False
        self._sized = False  # the body has a length or chunked framing (else it ends with the connection)
        self.complete = self._keep_alive = False
        self.desynced = False  # a message began after the response's end
        self.answered = False  # any byte came since the request was sent
        self.lost: Exception | None = None
        self.idle_since = 0.0  # when it went back to the pool
        self.sent_at = self.lost_at = 0.0  # when the last request was written; when the connection ended

    def send(self, head: bytes, body: bytes) -> asyncio.Future[None]:
        """Write a request; the future is done when the response's headers are in."""
        self.status, self.headers, self.content_type, self.complete, self._sized = 0, [], "", False, False
        self.answered = False
        self.sent_at = self.pool.loop.time()
        self.parser = httptools.HttpResponseParser(self)
        self._head = self.pool.loop.create_future()
        assert self.transport is not None
        self.transport.write(head + body)
        return self._head

    async def read(self) -> bytes:
        """The body's bytes that came since the last read (waiting for some); ``b""`` at its end."""
        while not self._chunks:
            if self.complete:
                return b""
            if self.lost is not None:
                raise self.lost
            self._waiter = self.pool.loop.create_future()
            await self._waiter
        chunk = self._chunks.popleft() if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._buffered -= len(chunk)
        if self._paused and self._buffered < HIGH_WATER // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return chunk

    def release(self) -> None:
        """Done with the response: the connection goes back to the pool or is closed."""
        if self.complete and self.lost is None and self._keep_alive and not self._chunks and not self.desynced:
            self._head = None
            self.pool.give_back(self)
        else:
            self.close()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are no asyncio.Transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost_at = self.pool.loop.time()
        self.pool.forget(self)
        if self._head is not None and self._head.done() and not self._sized and not self.complete and exc is None:
            self.complete = True  # a body without framing ends with the connection closed cleanly
        else:
            self.lost = ConnectionResetError(f"the server closed the connection{f': {exc}' if exc else ''}")
        if self._head is not None and not self._head.done():
            self._head.set_exception(self.lost or ConnectionResetError("the server closed the connection"))
        self._wake()

    def data_received(self, data: bytes) -> None:
        if self._head is None:  # nothing was asked on this connection
            self.close()
            return
        self.answered = True
        if self.desynced:
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as err:
            self.lost = ConnectionResetError(f"malformed response: {err}")
            if not self._head.done():
                self._head.set_exception(self.lost)
            self._wake()
            self.close()

    # httptools callbacks (a desynced connection's are ignored)
    def on_message_begin(self) -> None:
        if self.complete:
            self.desynced = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.desynced:
            self.headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
        if self.desynced:
            return
        self.status = self.parser.get_status_code()
        if self.status < 200:  # an interim answer (100 Continue): the response follows
            return
        for name, value in self.headers:
            lowered = name.lower()
            if lowered == "content-type":
                self.content_type = value.partition(";")[0].strip().lower()
            elif lowered in ("content-length", "transfer-encoding"):
                self._sized = True
        if self._head is not None and not self._head.done():
            self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        if self.desynced:
            return
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.desynced:
            return
        if self.status < 200:
            self.headers = []
            return
        self.complete = True
        self._keep_alive = self.parser.should_keep_alive()  # known within the callback only
        self._wake()


class UpstreamPool:
    """Keep-alive connections to the servers, by address: idle ones are reused for up to ``idle_s`` (a server
    closes its idle connections after a while of its own), newest first; ``resent`` is called on each request
    sent again after the keep-alive close race."""

    def __init__(self, connect_s: float, idle_s: float = 4.0, resent: Callable[[], None] | None = None):
        self.connect_s, self.idle_s, self.resent = connect_s, idle_s, resent
        self.loop = asyncio.get_running_loop()
        self.idle: dict[str, list[UpstreamConnection]] = {}

    async def request(self, address: str, method: str, path: str, headers: list[tuple[str, str]],
                      body: bytes) -> UpstreamConnection:
        """Send the request to ``address`` (``host:port``); the response once its headers are in. A reused
        connection the server closed within ``RESEND_WINDOW_S``, before answering a byte, is no failure of the
        server's: the request goes once more, on a new connection."""
        lines = [f"{method} {path} HTTP/1.1", f"host: {address}", f"content-length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in headers]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        connection = self._reusable(address)
        while True:
            reused, connection = connection is not None, connection or await self._connect(address)
            try:
                await connection.send(head, body)
            except ConnectionError:
                connection.close()
                if not reused or connection.answered or connection.lost_at - connection.sent_at > RESEND_WINDOW_S:
                    raise
                if self.resent is not None:
                    self.resent()
                connection = None
                continue
            except BaseException:
                connection.close()
                raise
            return connection

    def _reusable(self, address: str) -> UpstreamConnection | None:
        """The newest idle connection to ``address`` still open and idle for under ``idle_s``; older ones close."""
        idle = self.idle.get(address) or []
        self._expire(idle)
        while idle:
            connection = idle.pop()
            if connection.transport is not None and not connection.transport.is_closing():
                return connection
        return None

    def _expire(self, idle: list[UpstreamConnection]) -> None:
        since = self.loop.time() - self.idle_s
        while idle and idle[0].idle_since < since:
            idle.pop(0).close()

    async def _connect(self, address: str) -> UpstreamConnection:
        host, _, port = address.rpartition(":")
        try:
            async with asyncio.timeout(self.connect_s):
                _, connection = await self.loop.create_connection(lambda: UpstreamConnection(self, address),
                                                                  host.strip("[]"), int(port))
        except (OSError, ValueError) as err:  # TimeoutError is an OSError
            raise ConnectFailed(f"cannot connect to {address}: {type(err).__name__}: {err}") from err
        return connection

    def give_back(self, connection: UpstreamConnection) -> None:
        idle = self.idle.setdefault(connection.address, [])
        self._expire(idle)
        connection.idle_since = self.loop.time()
        if len(idle) < MAX_IDLE:
            idle.append(connection)
        else:
            connection.close()

    def forget(self, connection: UpstreamConnection) -> None:
        idle = self.idle.get(connection.address)
        if idle and connection in idle:
            idle.remove(connection)

    def close(self) -> None:
        for idle in self.idle.values():
            for connection in idle:
                connection.close()
        self.idle.clear()
