"""Sending a proxied request to the model servers: timeouts, and another server when one fails before it
answers.

:meth:`Upstreams.open` posts the request to the dispatch's server and returns once there is a response
worth relaying: connected within ``connect_s``, status line and headers within the request's first-byte limit,
and not a failure. The limit is ``first_byte_s`` when set; by default it is ``first_byte_factor`` × what the
request was expected to take there — its TTFT SLO, else the TTFT predicted on that server, its E2E when not
streaming — within [``first_byte_min_s``, ``first_byte_max_s``] (:meth:`UpstreamTimeouts.first_byte_of`), and
it cuts the wait only while the server makes no progress the router sees (:class:`ProgressWatch`: no token
relayed, no request answered): a server busy with other requests is loaded, not hanging, and the request waits
on for its headers up to ``first_byte_max_s``. A refused or reset connection, a timeout, or a 500 / 502 / 503 / 504 answer counts against the
server (:meth:`~router.control.service.RouterService.upstream_failed`: passive outlier detection) and, while
``retries`` allow and another server is left, the request goes there
(:meth:`~router.control.service.RouterService.retry`) — nothing has reached the client yet. When none is left
the last failure is the answer: the server's own 5xx, or 502 / 504 naming the server and the cause.
:meth:`Upstreams.chunks` reads a response body whose chunks arrive at most ``idle_s`` apart, all within
``total_s`` of the request's start, retries and first byte included (:mod:`router.http.client` keeps
the connections to each server alive between requests). Each limit costs one timer per request
(:class:`IdleWatch` for the body), not one per chunk: a stream's chunks are the proxy's most frequent event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from dataclasses import dataclass

import msgspec

from headroom.router.control.service import Dispatch, RouterService
from headroom.router.errors import NoCandidates
from headroom.router.fronts.openai_api import error_body
from headroom.router.http.client import ConnectFailed, UpstreamConnection, UpstreamPool

RETRY_STATUSES = frozenset({500, 502, 503, 504})
MAX_ERROR_BODY = 64 * 1024  # of a failed answer, relayed when no other server is left


@dataclass(frozen=True)
class UpstreamTimeouts:
    connect_s: float = 2.0
    first_byte_s: float = 0.0  # to the response's status line and headers; 0: derived per request (first_byte_of)
    idle_s: float = 30.0  # between chunks of a response body
    total_s: float = 600.0  # from the request's start to its response's end
    pool_idle_s: float = 4.0  # a kept-alive connection unused this long is closed
    first_byte_factor: float = 4.0  # × the request's expected first byte: its SLO, else its prediction
    first_byte_min_s: float = 2.0
    first_byte_max_s: float = 120.0  # also the limit of a request with neither SLO nor prediction

    def first_byte_of(self, dispatch: Dispatch) -> float:
        """How long ``dispatch``'s server may take to its response's headers: ``first_byte_s`` when set, else
        ``first_byte_factor`` × the request's TTFT SLO or, without one, the response start predicted for it on
        that server, bounded by [``first_byte_min_s``, ``first_byte_max_s``] (the max when neither is known)."""
        if self.first_byte_s > 0:
            return self.first_byte_s
        request, prediction = dispatch.request, dispatch.decision.chosen.prediction  # type: ignore[union-attr]
        expected_ms = request.slo_ttft_ms if request.slo_ttft_ms is not None else \
            prediction.response_ms(request.stream) if prediction is not None else None
        if expected_ms is None or not expected_ms > 0:  # NaN too
            return self.first_byte_max_s
        return min(self.first_byte_max_s, max(self.first_byte_min_s, self.first_byte_factor * expected_ms / 1000.0))


@dataclass(frozen=True)
class Answer:
    """A whole answer for the client: the router's own, or a server's failure relayed."""

    status: int
    body: bytes
    content_type: str = "application/json"

    @classmethod
    def error(cls, status: int, code: str, message: str) -> Answer:
        """An error in OpenAI's shape (:func:`~router.fronts.openai_api.error_body`)."""
        return cls(status, msgspec.json.encode(error_body(status, code, message)))


@dataclass(frozen=True)
class Opened:
    """The dispatch that answered with ``response``, or the last one that failed with ``error`` (released)."""

    dispatch: Dispatch
    response: UpstreamConnection | None = None
    error: Answer | None = None
    deadline: float = float("inf")  # the loop's time by which the response must have ended (total_s)


class Upstreams:
    def __init__(self, service: RouterService, timeouts: UpstreamTimeouts = UpstreamTimeouts(), retries: int = 2):
        self.service = service
        self.timeouts = timeouts
        self.retries = retries
        self._pool: UpstreamPool | None = None

    @property
    def pool(self) -> UpstreamPool:
        """The keep-alive connections to the servers (made on the running loop at first use)."""
        if self._pool is None:
            resent = self.service.metrics.upstream_resends.inc if self.service is not None else None
            self._pool = UpstreamPool(self.timeouts.connect_s, self.timeouts.pool_idle_s, resent)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    async def open(self, path: str, dispatch: Dispatch, body: bytes, headers: list[tuple[str, str]]) -> Opened:
        """Post ``body`` to the dispatch's server (and on failure to others); see the module docstring."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeouts.total_s
        while True:
            server = dispatch.server
            limit, fixed = self.timeouts.first_byte_of(dispatch), self.timeouts.first_byte_s > 0
            try:
                async with asyncio.timeout_at(min(loop.time() + (limit if fixed else self.timeouts.first_byte_max_s),
                                                  deadline)) as timer:
                    watch = None if fixed or self.service is None else ProgressWatch(
                        timer, limit, self.service.idle_s(server.server_id), loop)
                    try:
                        response = await self.pool.request(server.address, "POST", path, headers, body)
                    finally:
                        if watch is not None:
                            watch.close()
            except OSError as err:  # refused, reset, timed out
                reason, error = _failure(server.server_id, err)
            else:
                if response.status not in RETRY_STATUSES:
                    return Opened(dispatch, response=response, deadline=deadline)
                reason, error = f"status-{response.status}", await _relayed_failure(response, self.timeouts.idle_s)
            dispatch = self.service.upstream_failed(dispatch, reason)
            if len(dispatch.tried) >= self.retries:
                return Opened(dispatch, error=error)
            try:
                dispatch = self.service.retry(dispatch)
            except NoCandidates:
                return Opened(dispatch, error=error)

    async def chunks(self, response: UpstreamConnection, deadline: float | None = None) -> AsyncGenerator[bytes, None]:
        """The body's chunks as they arrive; :class:`TimeoutError` after ``idle_s`` without one, :class:`TotalTimeout` at
        the ``deadline`` (the loop's time; :attr:`Opened.deadline`, by default ``total_s`` from now)."""
        if deadline is None:
            deadline = asyncio.get_running_loop().time() + self.timeouts.total_s
        watch = IdleWatch(self.timeouts.idle_s, deadline)
        try:
            while True:
                chunk = await watch.read(response.read())
                if not chunk:
                    return
                yield chunk
        finally:
            watch.close()


class ProgressWatch:
    """Brings ``timer`` (the wait for a response's headers) forward to now once the server has made no progress
    for ``limit`` seconds (``idle_s()``: seconds since it last did); while it makes some, the wait goes on."""

    def __init__(self, timer: asyncio.Timeout, limit: float, idle_s: Callable[[], float],
                 loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._timer, self._limit, self._idle_s = timer, limit, idle_s
        self._handle = self._loop.call_later(limit, self._check)

    def _check(self) -> None:
        idle = self._idle_s()
        if idle >= self._limit:
            self._timer.reschedule(self._loop.time())
        else:
            self._handle = self._loop.call_later(self._limit - idle, self._check)

    def close(self) -> None:
        self._handle.cancel()


OVER_TOTAL = "the response took longer than the total limit"


class TotalTimeout(TimeoutError):
    """The response did not end within ``total_s`` of the request's start."""


class IdleWatch:
    """Fails a read that waits ``idle_s`` with :class:`TimeoutError`, from one timer that wakes at most every
    ``idle_s`` (an ``asyncio.timeout`` per read schedules and cancels a timer per chunk). Only the wait in
    :meth:`read` is timed: a client slow to take a chunk is not the server's silence."""

    def __init__(self, idle_s: float, deadline: float = float("inf")):
        self.idle_s = idle_s
        self._loop = asyncio.get_running_loop()
        self._deadline = deadline
        self._why = ""
        self._task = asyncio.current_task()
        self._since: float | None = None  # start of the read in progress
        self._expired = self._idle = False
        self._timer = self._loop.call_at(min(self._loop.time() + idle_s, deadline), self._check)

    async def read(self, pending: Awaitable[bytes]) -> bytes:
        self._since = self._loop.time()
        if self._since >= self._deadline:  # passed while the client took the last chunk
            self._since = None
            if isinstance(pending, Coroutine):
                pending.close()  # never awaited
            raise TotalTimeout(OVER_TOTAL)
        try:
            return await pending
        except asyncio.CancelledError:
            if self._expired and self._task is not None and self._task.uncancel() == 0:
                raise (TimeoutError if self._idle else TotalTimeout)(self._why) from None
            raise
        finally:
            self._since = None

    def _check(self) -> None:
        now = self._loop.time()
        waited = 0.0 if self._since is None else now - self._since
        if self._since is not None and self._task is not None and (waited >= self.idle_s or now >= self._deadline):
            self._idle = waited >= self.idle_s
            self._why = (f"no data from the server for {self.idle_s:g} s" if self._idle
                         else OVER_TOTAL)
            self._expired = True
            self._task.cancel()
        else:
            delay = self.idle_s - waited
            if now < self._deadline:
                delay = min(delay, self._deadline - now)
            self._timer = self._loop.call_later(delay, self._check)

    def close(self) -> None:
        self._timer.cancel()


def _failure(server_id: str, err: OSError) -> tuple[str, Answer]:
    """The reason label of a failed attempt and the answer the client gets if no other server is left."""
    if isinstance(err, ConnectFailed):
        reason, status = "connect", 502
    elif isinstance(err, TimeoutError):
        reason, status = "first-byte-timeout", 504
    else:
        reason, status = "reset", 502
    message = f"server {server_id}: {reason}: {type(err).__name__}: {err}"
    return reason, Answer.error(status, "upstream_timeout" if status == 504 else "upstream_unreachable", message)


async def _relayed_failure(response: UpstreamConnection, idle_s: float) -> Answer:
    """A server's failed answer as the client would get it (its body cut at ``MAX_ERROR_BODY``)."""
    body = b""
    try:
        async with asyncio.timeout(idle_s):
            while len(body) < MAX_ERROR_BODY and (chunk := await response.read()):
                body += chunk
    except OSError:
        pass
    finally:
        response.release()
    return Answer(response.status, body[:MAX_ERROR_BODY], response.content_type or "application/json")
