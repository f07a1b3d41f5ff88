"""The router's upstream client against model servers that misbehave at the HTTP level: a body cut by a
reset, bytes after the response's end, kept-alive connections that went stale. Raw asyncio servers on
127.0.0.1 speaking HTTP/1.1 byte by byte."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable

import pytest

from headroom.router.control.metrics import RouterMetrics
from headroom.router.http.client import UpstreamConnection, UpstreamPool
from tests.router.test_proxy_e2e import run

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


async def serving(handler: Handler) -> tuple[asyncio.Server, str]:
    async def closing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
    server = await asyncio.start_server(closing, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def stop(server: asyncio.Server, pool: UpstreamPool) -> None:
    pool.close()
    server.close()
    await asyncio.sleep(0.1)  # the handlers see their connections end


async def body_of(response: UpstreamConnection) -> bytes:
    body = b""
    while chunk := await response.read():
        body += chunk
    return body


def test_a_body_without_framing_cut_by_a_reset_is_broken_not_complete():
    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{"choi')
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async def scenario():
        server, address = await serving(reset)
        pool = UpstreamPool(connect_s=2.0)
        try:
            response = await pool.request(address, "POST", "/v1/completions", [], b"{}")
            with pytest.raises(ConnectionError):
                await body_of(response)
        finally:
            await stop(server, pool)
    run(scenario)


def test_a_second_response_nobody_asked_for_is_ignored_and_its_connection_never_pooled():
    async def twice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(OK + b"HTTP/1.1 500 Oops\r\nContent-Length: 5\r\nX-Extra: 1\r\n\r\nhello")
        await reader.read()  # until the client closes the connection

    async def scenario():
        server, address = await serving(twice)
        pool = UpstreamPool(connect_s=2.0)
        response = await pool.request(address, "POST", "/v1/completions", [], b"{}")
        await asyncio.sleep(0.1)  # the extra response is in
        answer = response.status, response.headers, await body_of(response)
        response.release()
        pooled = list(pool.idle.get(address, []))
        await stop(server, pool)
        return answer, pooled
    (status, headers, body), pooled = run(scenario)
    assert (status, body, pooled) == (200, b"{}", [])
    assert [name for name, _ in headers] == ["Content-Length"]


def kept_alive(answers: list[int], close_after_s: float = 0.0, heads: list[bytes] | None = None) -> Handler:
    """Answers the requests on each connection while its entry in ``answers`` lasts (the first connection
    its first number of them, ...), then takes one more (into ``heads``) and closes the connection
    ``close_after_s`` later without a byte."""
    connections = iter(answers)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(next(connections, 100)):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(OK)
        head = await reader.readuntil(b"\r\n\r\n")
        if heads is not None:
            heads.append(head)
        await asyncio.sleep(close_after_s)
    return handler


async def two_requests(handler: Handler, pause_s: float, idle_s: float,
                       metrics: RouterMetrics | None = None) -> tuple[list[int], int]:
    """Two requests ``pause_s`` apart from a pool keeping connections ``idle_s`` (counting its resends in
    ``metrics``): their statuses and how many connections the server saw."""
    peers: list[object] = []

    async def counting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer.get_extra_info("peername"))
        await handler(reader, writer)
    server, address = await serving(counting)
    pool = UpstreamPool(connect_s=2.0, idle_s=idle_s, resent=metrics.upstream_resends.inc if metrics else None)
    statuses = []
    try:
        for _ in range(2):
            response = await pool.request(address, "GET", "/", [], b"")
            statuses.append(response.status)
            await body_of(response)
            response.release()
            await asyncio.sleep(pause_s)
    finally:
        await stop(server, pool)
    return statuses, len(peers)


def test_a_kept_alive_connection_is_reused_within_idle_s_and_closed_after():
    assert run(lambda: two_requests(kept_alive([]), pause_s=0.05, idle_s=10.0)) == ([200, 200], 1)
    assert run(lambda: two_requests(kept_alive([]), pause_s=0.3, idle_s=0.2)) == ([200, 200], 2)


def resends(metrics: RouterMetrics) -> float | None:
    return metrics.registry.get_sample_value("headroom_router_upstream_resends_total")


def test_a_reused_connection_the_server_closed_at_once_before_answering_is_replaced_once_and_counted():
    metrics = RouterMetrics()
    assert run(lambda: two_requests(kept_alive([1]), pause_s=0.05, idle_s=10.0, metrics=metrics)) == ([200, 200], 2)
    assert resends(metrics) == 1


def test_a_reused_connection_closed_a_while_after_the_request_is_a_failure_not_resent():
    metrics, heads = RouterMetrics(), []  # the server may have acted on the request: it must not get it twice
    with pytest.raises(ConnectionResetError):
        run(lambda: two_requests(kept_alive([1, 1], close_after_s=1.0, heads=heads), pause_s=0.05, idle_s=10.0,
                                 metrics=metrics))
    assert len(heads) == 1 and resends(metrics) == 0

