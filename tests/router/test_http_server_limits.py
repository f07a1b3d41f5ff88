"""What the router's HTTP server bounds per client: the answers a pipelining client leaves unread, the size
of a request's head, the time a request may take to arrive, and what a request may not smuggle in. The
real :class:`~router.http_server.HttpServer` on 127.0.0.1, raw sockets."""

import asyncio

from headroom.router.http_messages import Reply, Request, Routes
from headroom.router.http_server import HttpServer
from tests.router.test_proxy_e2e import run
from tests.router.test_proxy_http import read_response

ANSWER = b"x" * 65536


def routes(seen: list[Request] | None = None) -> Routes:
    """``GET /`` and ``POST /`` answer 64 KiB; errors answer their status and message."""
    async def answer(request: Request, reply: Reply) -> None:
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
