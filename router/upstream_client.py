"""The proxy's HTTP/1.1 client to the model servers: asyncio protocols, httptools' C parser, and pooled
keep-alive connections per server.

:meth:`UpstreamPool.request` sends a request on an idle connection to the server, or a new one (within
``connect_s``; failing that, :class:`ConnectFailed`), and returns the :class:`UpstreamResponse` once its
status line and headers are in. Its body is read chunk by chunk as it arrives (:meth:`UpstreamResponse.read`,
``b""`` at its end, :class:`ConnectionError` when the connection breaks first); a reader that falls behind
pauses the socket. :meth:`UpstreamResponse.release` returns the connection to the pool when the answer was
read to its end and the server keeps the connection alive, and closes it otherwise. A connection the
server closes while idle leaves the pool.
"""

from __future__ import annotations

import asyncio
from collections import deque

import httptools

HIGH_WATER = 256 * 1024  # bytes of body buffered before the socket is paused
MAX_IDLE = 256  # idle connections kept per server


class ConnectFailed(ConnectionError):
    """No connection to the server could be made (refused, unreachable, or not within ``connect_s``)."""


class UpstreamResponse(asyncio.Protocol):
    """One connection to a server, carrying one request and its response at a time."""

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
        self.lost: Exception | None = None

    def send(self, head: bytes, body: bytes) -> asyncio.Future[None]:
        """Write a request; the future is done when the response's headers are in."""
        self.status, self.headers, self.content_type, self.complete, self._sized = 0, [], "", False, False
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
        if self.complete and self.lost is None and self._keep_alive and not self._chunks:
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
        self.pool.forget(self)
        if self._head is not None and self._head.done() and not self._sized and not self.complete:
            self.complete = True  # a body without framing ends with the connection
        else:
            self.lost = ConnectionResetError(f"the server closed the connection{f': {exc}' if exc else ''}")
        if self._head is not None and not self._head.done():
            self._head.set_exception(self.lost or ConnectionResetError("the server closed the connection"))
        self._wake()

    def data_received(self, data: bytes) -> None:
        if self._head is None:  # nothing was asked on this connection
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as err:
            self.lost = ConnectionResetError(f"malformed response: {err}")
            if not self._head.done():
                self._head.set_exception(self.lost)
            self._wake()
            self.close()

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_headers_complete(self) -> None:
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
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.status < 200:
            self.headers = []
            return
        self.complete = True
        self._keep_alive = self.parser.should_keep_alive()  # known within the callback only
        self._wake()


class UpstreamPool:
    def __init__(self, connect_s: float):
        self.connect_s = connect_s
        self.loop = asyncio.get_running_loop()
        self.idle: dict[str, list[UpstreamResponse]] = {}

    async def request(self, address: str, method: str, path: str, headers: list[tuple[str, str]],
                      body: bytes) -> UpstreamResponse:
        """Send the request to ``address`` (``host:port``); the response once its headers are in."""
        idle = self.idle.get(address) or []
        while idle and (idle[-1].transport is None or idle[-1].transport.is_closing()):
            idle.pop()
        connection = idle.pop() if idle else await self._connect(address)
        lines = [f"{method} {path} HTTP/1.1", f"host: {address}", f"content-length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in headers]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        try:
            await connection.send(head, body)
        except BaseException:
            connection.close()
            raise
        return connection

    async def _connect(self, address: str) -> UpstreamResponse:
        host, _, port = address.rpartition(":")
        try:
            async with asyncio.timeout(self.connect_s):
                _, connection = await self.loop.create_connection(lambda: UpstreamResponse(self, address),
                                                                  host.strip("[]"), int(port))
        except (OSError, ValueError) as err:  # TimeoutError is an OSError
            raise ConnectFailed(f"cannot connect to {address}: {type(err).__name__}: {err}") from err
        return connection

    def give_back(self, connection: UpstreamResponse) -> None:
        idle = self.idle.setdefault(connection.address, [])
        if len(idle) < MAX_IDLE:
            idle.append(connection)
        else:
            connection.close()

    def forget(self, connection: UpstreamResponse) -> None:
        idle = self.idle.get(connection.address)
        if idle and connection in idle:
            idle.remove(connection)

    def close(self) -> None:
        for idle in self.idle.values():
            for connection in idle:
                connection.close()
        self.idle.clear()
