"""What the router's HTTP server (:mod:`router.http.server`) hands its handlers: the parsed :class:`HttpRequest`,
the :class:`Reply` to write the answer with — a whole body, or a chunked stream, each with a ``date`` — and
the :class:`Routes` that pick a handler by path and method (``HEAD`` by ``GET``'s, answered without the
body), with the answers to what none serves.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from http import HTTPStatus
from typing import Protocol


class Sink(Protocol):
    """The connection a reply is written on."""

    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...


class HttpRequest:
    """One parsed request: method, path (with its query), headers in order, the whole body, the client's
    address, and how its connection goes on."""

    __slots__ = ("method", "path", "headers", "body", "peer", "keep_alive", "too_large", "http10")

    def __init__(self, method: str, path: str, headers: list[tuple[str, str]], body: bytes, peer: str | None,
                 keep_alive: bool, too_large: bool = False, http10: bool = False):
        self.method, self.path, self.headers, self.body = method, path, headers, body
        self.peer, self.keep_alive, self.too_large, self.http10 = peer, keep_alive, too_large, http10

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (lowercase)."""
        return next((value for key, value in self.headers if key.lower() == name), None)


Handler = Callable[[HttpRequest, "Reply"], Awaitable[None]]


_STATUS_LINES = {status.value: f"HTTP/1.1 {status.value} {status.phrase}" for status in HTTPStatus}


_date = (0, "")  # the date header's value, made once a second


def _http_date() -> str:
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, formatdate(now, usegmt=True))
    return _date[1]


def _head(status: int, headers: dict[str, str], framing: str) -> bytes:
    lines = [_STATUS_LINES.get(status) or f"HTTP/1.1 {status} Status {status}", f"date: {_http_date()}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(framing)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def whole_response(status: int, headers: dict[str, str], body: bytes, close: bool = False,
                   bodiless: bool = False) -> bytes:
    """A complete response with a ``content-length`` (and ``connection: close`` when ``close``); without the
    body itself when ``bodiless`` (the answer to a ``HEAD``)."""
    framing = f"content-length: {len(body)}" + ("\r\nconnection: close" if close else "")
    return _head(status, headers, framing) + (b"" if bodiless else body)


class Reply:
    """The answer to one request, written on its connection."""

    __slots__ = ("_connection", "closes", "chunked", "bodiless", "started", "done")

    def __init__(self, connection: Sink, close: bool, chunked: bool = True, bodiless: bool = False):
        self._connection = connection
        self.bodiless = bodiless  # the answer to a HEAD: its headers alone, of a whole answer or a stream
        self.closes = close or not chunked
        self.chunked = chunked  # an HTTP/1.0 client knows no chunks: its stream ends with the connection
        self.started = self.done = False

    def send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        """The whole answer at once."""
        self._connection.write(whole_response(status, headers, body, self.closes, self.bodiless))
        self.started = self.done = True

    def start(self, status: int, headers: dict[str, str]) -> None:
        """The status and headers of a chunked answer; :meth:`write` its chunks, :meth:`end` it."""
        framing = "connection: close" if not self.chunked else \
            "transfer-encoding: chunked" + ("\r\nconnection: close" if self.closes else "")
        self._connection.write(_head(status, headers, framing))
        self.started = True

    async def write(self, chunk: bytes) -> None:
        """One chunk, once the client takes it; raises :class:`ConnectionError` when the client is gone."""
        if chunk and not self.bodiless:
            self._connection.write(b"%x\r\n%b\r\n" % (len(chunk), chunk) if self.chunked else chunk)
            await self._connection.drain()

    def end(self) -> None:
        if self.chunked and not self.bodiless:
            self._connection.write(b"0\r\n\r\n")
        self.done = True


class Routes:
    """Handlers by path and method, and the answers to what none serves."""

    def __init__(self, unmatched: Callable[[HttpRequest, int], Handler], too_large: Handler,
                 failed: Callable[[int, str], bytes], guard: Callable[[HttpRequest, Reply], bool] | None = None):
        self.by_path: dict[str, dict[str, Handler]] = {}
        self.unmatched = unmatched  # (request, 404 or 405) -> the handler answering it
        self.too_large = too_large
        self.failed = failed  # (400 or 500, message) -> a whole response, closing the connection
        self.guard = guard  # answers a request itself and returns False when it may not go on

    def add(self, method: str, path: str, handler: Handler) -> None:
        self.by_path.setdefault(path, {})[method] = handler

    def handler(self, request: HttpRequest) -> Handler:
        if request.too_large:
            return self.too_large
        methods = self.by_path.get(request.path.partition("?")[0])
        if methods is None:
            return self.unmatched(request, 404)
        handler = methods.get(request.method) or (methods.get("GET") if request.method == "HEAD" else None)
        return handler or self.unmatched(request, 405)
