"""The router's HTTP/1.1 server for the proxy's hot path: one listener, a :class:`~router.http.connection.Connection`
per client, and one timer that holds every connection to the server's limits.

A request still arriving after ``request_s`` is answered 408; a connection idle for ``keep_alive_s`` is closed
(and cut if its client has still not read the end), one that has asked nothing ``request_s`` after it opened is
closed, and one whose client takes nothing of its answers for as long is cut. A connection beyond
``max_connections`` is answered 503 (OpenAI's error shape, naming the limit) and closed, and ``on_refused`` called. :meth:`HttpServer.close` stops accepting, closes idle connections, and gives the requests in
progress ``grace_s`` to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable

from headroom.router.http.connection import Connection
from headroom.router.http.messages import Routes

MIN_SWEEP_S = 0.05  # the connections' sweep runs at most this often


class HttpServer:
    """Serves :class:`Routes` to the clients of one listener, one :class:`Connection` each, within limits on
    a request's body (``max_body``), head (``max_head_bytes``, ``max_headers``: 431 beyond), time to arrive
    (``request_s``: 408 beyond) and a connection's idleness (``keep_alive_s``, also the longest a client may
    leave its answers unread)."""

    def __init__(self, routes: Routes, max_body: int, keep_alive_s: float = 75.0, *, max_head_bytes: int = 65536,
                 max_headers: int = 100, request_s: float = 30.0, max_connections: int = 4096,
                 on_refused: Callable[[], None] | None = None):
        self.routes, self.max_body, self.keep_alive_s = routes, max_body, keep_alive_s
        self.max_head_bytes, self.max_headers, self.request_s = max_head_bytes, max_headers, request_s
        self.max_connections, self.on_refused = max_connections, on_refused
        self.loop = asyncio.get_running_loop()
        self.connections: set[Connection] = set()
        self.closing = False
        self._server: asyncio.Server | None = None
        self._every = max(min(keep_alive_s, request_s) / 4, MIN_SWEEP_S)
        self._sweep = self.loop.call_later(self._every, self._sweep_connections)

    def _sweep_connections(self) -> None:
        """408 to a request still arriving after ``request_s``; close the connections idle for ``keep_alive_s``
        and cut those whose client has read nothing for as long (one timer for all, not one per request)."""
        now = self.loop.time()
        for connection in list(self.connections):
            began = connection.began if connection.refused is None else None  # a refused one reads no more
            late = began is not None and began < now - self.request_s
            if connection.stalled_for(now) > self.keep_alive_s:
                connection.abort()  # its handler is cancelled, releasing its server
            elif late and not connection.dropping and not connection.paused:
                connection.refuse(408, f"the request did not arrive within {self.request_s:g} s")
            elif connection.idle and not connection.asked and connection.active < now - self.request_s:
                connection.close()  # opened, and nothing asked on it
            elif connection.idle and connection.active < now - self.keep_alive_s:
                if connection.closed:
                    connection.abort()  # closed keep_alive_s ago, and its client has still not read the end
                else:
                    connection.close()
        self._sweep = self.loop.call_later(self._every, self._sweep_connections)

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None) -> int:
        """Listen on ``host:port`` (0: any free port); returns the port."""
        self._server = await self.loop.create_server(lambda: Connection(self.routes, self),
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
            connection.abort()  # past the grace: a client that reads nothing must not hold the stop
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
