"""What the router's HTTP server bounds per client: the answers a pipelining client leaves unread, the size
of a request's head, the time a request may take to arrive, what a request may not smuggle in, and how long
a connection whose client reads nothing is kept (stalled, closing, past a stop's grace or a refusal's
linger). The real :class:`~router.http.server.HttpServer` on 127.0.0.1, raw sockets."""

import asyncio
import gc

import pytest

from headroom.router.http.connection import MAX_PENDING
from headroom.router.http.messages import HttpRequest, Reply, Routes
from headroom.router.http.server import MIN_SWEEP_S, HttpServer
from tests.router.test_proxy_e2e import run

ANSWER = b"x" * 65536


def routes(seen: list[HttpRequest] | None = None) -> Routes:
    """``GET /`` and ``POST /`` answer 64 KiB; errors answer their status and message."""
    async def answer(request: HttpRequest, reply: Reply) -> None:
        if seen is not None:
            seen.append(request)
        reply.send(200, {"content-type": "text/plain"}, ANSWER)
    routes = Routes(lambda request, status: answer, answer, lambda status, message: b"HTTP/1.1 %d %s\r\n"
                    b"content-length: 0\r\nconnection: close\r\n\r\n" % (status, message.encode()))
    routes.add("GET", "/", answer)
    routes.add("POST", "/", answer)
    return routes


async def serving(**limits) -> tuple[HttpServer, int]:
    server = HttpServer(routes(limits.pop("seen", None)), max_body=1024, **limits)
    return server, await server.start("127.0.0.1", 0)


def test_a_pipelining_client_that_reads_nothing_holds_one_answer_in_the_servers_buffer_not_all():
    async def scenario():
        server, port = await serving()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n" * 400)  # 25 MiB of answers, never read
        await writer.drain()
        await asyncio.sleep(1.0)
        buffered = sum(c.transport.get_write_buffer_size() for c in server.connections if c.transport)
        writer.close()
        await server.close(grace_s=0.1)
        return buffered
    assert run(scenario) < 2 * len(ANSWER) + 65536


async def answer_to(port: int, *parts: bytes, pause_s: float = 0.001) -> tuple[bytes, bool]:
    """Send ``parts`` (``pause_s`` apart) until an answer comes, and read to the connection's end: what came
    back, and whether it came before all parts were sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    first = asyncio.create_task(reader.read(1))
    sent = 0
    while sent < len(parts) and not first.done():
        writer.write(parts[sent])
        await writer.drain()
        await asyncio.sleep(pause_s)
        sent += 1
    data = await asyncio.wait_for(first, timeout=10) + await asyncio.wait_for(reader.read(), timeout=10)
    writer.close()
    return data, sent < len(parts)


def test_a_request_head_over_max_head_bytes_or_max_headers_is_answered_431_and_the_connection_closed():
    async def scenario():
        server, port = await serving(max_head_bytes=4096, max_headers=10)
        long_value = [b"POST / HTTP/1.1\r\nHost: h\r\nX-Big: "] + [b"a" * 1024] * 2000  # 2 MiB, never ending
        many = b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * 11 + b"\r\n"
        within = b"GET / HTTP/1.1\r\nConnection: close\r\n" + b"X-A: b\r\n" * 8 + b"\r\n"
        answers = [await answer_to(port, *long_value), await answer_to(port, many), await answer_to(port, within)]
        await server.close(grace_s=0.1)
        return answers
    (big, big_cut), (many, _), (within, _) = run(scenario)
    assert big.startswith(b"HTTP/1.1 431 ") and big_cut  # refused before the 2 MiB were sent
    assert many.startswith(b"HTTP/1.1 431 ")
    assert within.startswith(b"HTTP/1.1 200 ")


def test_a_request_that_trickles_in_for_longer_than_request_s_is_answered_408_though_bytes_keep_coming():
    async def scenario():
        server, port = await serving(request_s=0.4, keep_alive_s=0.4)
        head = [b"POST / HTTP/1.1\r\nHost: h\r\n"] + [b"X-%d: y\r\n" % i for i in range(30)]
        body = [b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 30\r\n\r\n"] + [b"a"] * 30
        answers = [await answer_to(port, *head, pause_s=0.1), await answer_to(port, *body, pause_s=0.1)]
        await server.close(grace_s=0.1)
        return answers
    for answer, cut in run(scenario):  # 30 parts 0.1 s apart: 3 s, over 0.4 s and its sweeps
        assert answer.startswith(b"HTTP/1.1 408 ") and cut


def served(request: bytes) -> tuple[bytes, list[HttpRequest]]:
    """The answer to ``request`` and the requests the handler was given."""
    async def scenario():
        seen: list[HttpRequest] = []
        server, port = await serving(seen=seen)
        try:
            answer, _ = await answer_to(port, request)
        finally:
            await server.close(grace_s=0.1)
        return answer, seen
    return run(scenario)


def test_trailers_of_a_chunked_body_are_not_taken_as_request_headers():
    answer, seen = served(b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                          b"3\r\nabc\r\n0\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 ") and [r.body for r in seen] == [b"abc"]
    assert [name.lower() for name, _ in seen[0].headers] == ["host", "transfer-encoding", "connection"]


def test_an_upgrade_request_is_answered_once_with_400():
    answer, seen = served(b"POST / HTTP/1.1\r\nHost: h\r\nConnection: upgrade\r\nUpgrade: websocket\r\n"
                          b"Content-Length: 3\r\n\r\nabc")
    assert answer.startswith(b"HTTP/1.1 400 ") and answer.count(b"HTTP/1.1") == 1 and seen == []


def test_a_body_announced_over_max_body_is_refused_before_100_continue():
    async def scenario():
        server, port = await serving()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5000\r\n\r\n")
        first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=5)
        writer.close()
        await server.close(grace_s=0.1)
        return first
    assert run(scenario).startswith(b"HTTP/1.1 200 ")  # the too_large handler's answer (this routes' 200), no 100


def test_a_client_leaving_while_its_answer_waits_in_the_buffer_leaves_no_unretrieved_error():
    async def scenario():
        async def big_then_busy(request: HttpRequest, reply: Reply) -> None:
            reply.send(200, {"content-type": "text/plain"}, ANSWER * 64)  # 4 MiB: writing pauses
            await asyncio.sleep(5)  # busy with something else: nobody drains
        server = HttpServer(Routes(lambda request, status: big_then_busy, big_then_busy, lambda s, m: b""), 1024)
        port = await server.start("127.0.0.1", 0)
        loop = asyncio.get_running_loop()
        errors: list[dict] = []
        loop.set_exception_handler(lambda loop, context: errors.append(context))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        await reader.read(1)
        writer.transport.abort()
        await asyncio.sleep(0.2)
        await server.close(grace_s=0.1)
        gc.collect()
        await asyncio.sleep(0)
        return [context.get("message") for context in errors]
    assert run(scenario) == []


def test_a_head_split_across_reads_and_followed_by_a_large_body_is_served_not_431():
    async def scenario():
        server, port = await serving(max_head_bytes=4096, max_headers=10)
        server.max_body = 256 * 1024
        body = b"x" * (120 * 1024)  # arrives in the read that completes the head: body bytes, not head bytes
        rest = b"Host: h\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body)
        answer, _ = await answer_to(port, b"POST / HTTP/1.1\r\n", rest + body, pause_s=0.2)
        await server.close(grace_s=0.1)
        return answer
    assert run(scenario).startswith(b"HTTP/1.1 200 ")


def test_the_connections_sweep_is_never_scheduled_sooner_than_min_sweep_s():
    async def scenario():
        server = HttpServer(routes(), max_body=1024, request_s=0.0)
        delay = server._sweep.when() - server.loop.time()
        await server.close(grace_s=0.1)
        return delay
    assert run(scenario) > MIN_SWEEP_S / 2


def test_a_pipelined_request_cut_while_the_server_paused_reading_is_not_answered_408():
    async def scenario():
        server, port = await serving(request_s=0.4, keep_alive_s=5.0)

        async def slow(request: HttpRequest, reply: Reply) -> None:
            await asyncio.sleep(1.5)  # a long answer ahead: reading stays paused meanwhile
            reply.send(200, {}, b"slow")
        server.routes.add("GET", "/slow", slow)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        last = b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"
        writer.write(b"GET /slow HTTP/1.1\r\n\r\n" + b"GET / HTTP/1.1\r\n\r\n" * (MAX_PENDING + 1) + last[:10])
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(last[10:])
        data = await asyncio.wait_for(reader.read(), timeout=10)
        writer.close()
        await server.close(grace_s=0.1)
        return data
    data = run(scenario)
    assert b" 408 " not in data and data.count(b"HTTP/1.1 200 ") == MAX_PENDING + 3


def test_head_on_a_streaming_route_is_answered_with_its_headers_and_no_chunks():
    async def scenario():
        server, port = await serving()

        async def stream(request: HttpRequest, reply: Reply) -> None:
            reply.start(200, {"content-type": "text/event-stream"})
            for _ in range(3):
                await reply.write(b"data: x\n\n")
            reply.end()
        server.routes.add("GET", "/stream", stream)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"HEAD /stream HTTP/1.1\r\n\r\nGET /stream HTTP/1.1\r\nConnection: close\r\n\r\n")
        data = await asyncio.wait_for(reader.read(), timeout=10)
        writer.close()
        await server.close(grace_s=0.1)
        return data
    head, _, get = run(scenario).partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head and get.startswith(b"HTTP/1.1 200 ")  # nothing in between
    assert get.count(b"data: x") == 3 and get.endswith(b"0\r\n\r\n")


async def endless_stream_unread(server: HttpServer, port: int) -> tuple[asyncio.Event, asyncio.StreamWriter]:
    """A client asks ``GET /endless`` and reads none of it; the event is set once the handler has ended."""
    ended = asyncio.Event()

    async def endless(request: HttpRequest, reply: Reply) -> None:
        try:
            reply.start(200, {"content-type": "text/event-stream"})
            for _ in range(100_000):  # 6 GiB at most: writing pauses long before
                await reply.write(ANSWER)
        finally:
            ended.set()
    server.routes.add("GET", "/endless", endless)
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /endless HTTP/1.1\r\nHost: h\r\n\r\n")
    await writer.drain()
    return ended, writer


async def gone(server: HttpServer, within_s: float = 10.0) -> bool:
    """Whether every connection of ``server`` has ended within ``within_s``."""
    for _ in range(int(within_s / 0.05)):
        if not server.connections:
            return True
        await asyncio.sleep(0.05)
    return False


@pytest.mark.parametrize("then", [b"", b"GET / HTTP/1.1\r\nHost: h\r\n"], ids=["alone", "then-a-request-answered-408"])
def test_a_client_that_reads_nothing_of_its_answer_for_keep_alive_s_is_cut_and_its_handler_ended(then):
    async def scenario():
        server, port = await serving(keep_alive_s=0.5, request_s=0.5)
        ended, writer = await endless_stream_unread(server, port)
        writer.write(then)  # the next request's head, never finished: 408, and the client still cut
        try:
            await asyncio.wait_for(ended.wait(), timeout=10)
            return await gone(server)
        finally:
            writer.close()
            await server.close(grace_s=0.1)
    assert run(scenario)


def test_a_stop_past_its_grace_aborts_a_connection_whose_client_reads_nothing():
    async def scenario():
        server, port = await serving()
        ended, writer = await endless_stream_unread(server, port)
        await asyncio.sleep(0.3)  # the answer's buffer fills
        await server.close(grace_s=0.2)
        result = ended.is_set(), await gone(server, within_s=1.0)
        writer.close()
        return result
    assert run(scenario) == (True, True)


def test_a_refused_connection_whose_client_never_closes_is_aborted_after_the_linger(monkeypatch):
    monkeypatch.setattr("headroom.router.http.connection.LINGER_S", 0.3)

    async def scenario():
        server, port = await serving(max_headers=10)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\n" + b"X-A: a\r\n" * 20 + b"\r\n")
        try:
            answer = await asyncio.wait_for(reader.read(), timeout=10)  # the answer, then the server's end of writing
            return answer, await gone(server)  # the client never closes its side
        finally:
            writer.close()
            await server.close(grace_s=0.1)
    answer, result = run(scenario)
    assert answer.startswith(b"HTTP/1.1 431 ") and result


def test_a_client_reading_a_large_answer_slowly_for_longer_than_keep_alive_s_gets_all_of_it():
    size = 16 * 1024 * 1024

    async def scenario():
        server, port = await serving(keep_alive_s=1.0)

        async def large(request: HttpRequest, reply: Reply) -> None:
            reply.send(200, {"content-type": "application/octet-stream"}, b"x" * size)
        server.routes.add("GET", "/large", large)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /large HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        received = 0
        try:
            for _ in range(1000):  # 256 KiB every 50 ms at most: about 4 s for the answer
                chunk = await asyncio.wait_for(reader.read(256 * 1024), timeout=10)
                if not chunk:
                    break
                received += len(chunk)
                await asyncio.sleep(0.05)
            return received
        finally:
            writer.close()
            await server.close(grace_s=0.1)
    assert run(scenario) > size


def test_a_closed_connection_whose_client_never_reads_the_end_is_cut_after_keep_alive_s():
    async def scenario():
        server, port = await serving(keep_alive_s=0.5)

        async def large(request: HttpRequest, reply: Reply) -> None:
            reply.send(200, {"content-type": "application/octet-stream"}, b"x" * 16 * 1024 * 1024)
        server.routes.add("GET", "/large", large)
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        while not server.connections:
            await asyncio.sleep(0.01)
        for connection in server.connections:  # writing never pauses: the answer's end waits under the high mark
            connection.transport.set_write_buffer_limits(high=64 * 1024 * 1024)
        writer.write(b"GET /large HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        try:
            return await gone(server)
        finally:
            writer.close()
            await server.close(grace_s=0.1)
    assert run(scenario)


def test_a_refused_connection_with_a_request_begun_behind_it_is_closed_after_keep_alive_s(monkeypatch):
    monkeypatch.setattr("headroom.router.http.connection.LINGER_S", 60.0)  # not the linger's abort: the keep-alive limit's close

    async def scenario():
        server, port = await serving(max_headers=10, keep_alive_s=0.5, request_s=0.2)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\n" + b"X-A: a\r\n" * 20 + b"\r\n" + b"GET / HTTP/1.1\r\nHost: h\r\n")
        try:
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            return answer, await gone(server)
        finally:
            writer.close()
            await server.close(grace_s=0.1)
    answer, result = run(scenario)
    assert answer.startswith(b"HTTP/1.1 431 ") and result
