"""The proxy's HTTP/1.1 as clients use it: pipelined keep-alive requests with chunked and sized bodies,
``Expect: 100-continue``, HTTP/1.0, clients that leave, idle connections, and a graceful stop. The real router, real aiohttp model servers, raw sockets."""

import asyncio

import aiohttp

from headroom.router.http.messages import HttpRequest, Reply, Routes
from headroom.router.http.server import HttpServer
from tests.router.routercases import wait_for
from tests.router.test_proxy_e2e import run, started
from tests.router.upstream import Upstream, upstreams

BODY = b'{"prompt": "x", "max_tokens": 2}'


async def read_response(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    """One response off a raw connection: its status line, headers (lowercase names) and body."""
    lines = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
    headers = {name.lower(): value for name, value in (line.split(": ", 1) for line in lines[1:] if line)}
    if "content-length" in headers:
        return lines[0], headers, await reader.readexactly(int(headers["content-length"]))
    payload = b""
    while (size := int((await reader.readline()).strip(), 16)) > 0:
        payload += (await reader.readexactly(size + 2))[:-2]
    await reader.readline()
    return lines[0], headers, payload


def test_pipelined_keep_alive_requests_with_chunked_and_sized_bodies_are_answered_in_order_over_kept_connections():
    body = BODY
    sized = (b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\n"
             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    chunked = (b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (10, body[:10], len(body) - 10, body[10:]))
    health = b"GET /healthz HTTP/1.1\r\nHost: r\r\n\r\n"

    async def scenario():
        async with upstreams(Upstream("a")) as servers:
            router = await started(servers)
            reader, writer = await asyncio.open_connection("127.0.0.1", router.http_port)
            writer.write(sized + chunked + health + sized)  # four requests at once, one connection
            await writer.drain()
            answers = []
            for _ in range(4):
                status, _, payload = await read_response(reader)
                answers.append((status, payload))
            writer.close()
            await router.stop()
            return answers, [len(s.received) for s in servers], servers[0].peers
    answers, received, peers = run(scenario)
    assert [status for status, _ in answers] == ["HTTP/1.1 200 OK"] * 4 and received == [3]
    assert len(set(peers)) == 1  # one connection to the server, kept alive between the requests
    assert [b'"servers"' in payload for _, payload in answers] == [False, False, True, False]
    assert all(b'"choices"' in payload for _, payload in answers[:2] + answers[3:])


def test_a_client_expecting_100_continue_gets_it_before_it_sends_the_body():
    async def scenario():
        async with upstreams(Upstream("a")) as servers:
            router = await started(servers)
            reader, writer = await asyncio.open_connection("127.0.0.1", router.http_port)
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nExpect: 100-continue\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(BODY))
            interim = await reader.readuntil(b"\r\n\r\n")
            writer.write(BODY)
            status, _, payload = await read_response(reader)
            writer.close()
            await router.stop()
            return interim, status, payload
    interim, status, payload = run(scenario)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert status == "HTTP/1.1 200 OK" and b'"choices"' in payload


def test_a_stopping_router_finishes_the_streams_in_progress_and_takes_no_new_connection():
    async def scenario():
        async with upstreams(Upstream("a", token_delay_s=0.05)) as servers:
            router = await started(servers)
            url = f"http://127.0.0.1:{router.http_port}/v1/completions"
            async with aiohttp.ClientSession() as http:
                async with http.post(url, json={"prompt": "x", "max_tokens": 20, "stream": True}) as response:
                    first = await response.content.readuntil(b"\n\n")
                    stopping = asyncio.create_task(router.stop(grace_s=10))
                    await asyncio.sleep(0.1)
                    rest = await response.read()
                try:
                    await asyncio.open_connection("127.0.0.1", router.http_port)
                    refused = False
                except OSError:
                    refused = True
            await stopping
            return first + rest, refused, router
    text, refused, router = run(scenario)
    assert text.count(b"data: {") == 21 and text.endswith(b"data: [DONE]\n\n")  # 20 tokens and the usage
    assert refused and len(router.pool.inflight) == 0


def test_a_client_leaving_mid_stream_or_before_the_answer_releases_its_server_at_once():
    async def scenario():
        async with upstreams(Upstream("a", token_delay_s=0.2)) as servers:  # 20 tokens: a 4 s answer
            router = await started(servers)
            for stream in (True, False):  # one leaves mid-stream, one before the first byte
                reader, writer = await asyncio.open_connection("127.0.0.1", router.http_port)
                body = b'{"prompt": "x", "max_tokens": 20, "stream": %s}' % (b"true" if stream else b"false")
                writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body), body))
                if stream:
                    await reader.readuntil(b"\n\n")  # the headers and the first chunk
                else:
                    assert await wait_for(lambda: len(router.pool.inflight) == 1)
                writer.close()
                released = await wait_for(lambda: len(router.pool.inflight) == 0, timeout_s=2.0)
                assert released, f"stream={stream}: still in flight"
            await router.stop()
            return router
    router = run(scenario)
    exposition = router.metrics.exposition().decode()
    assert 'headroom_router_request_errors_total{kind="client-disconnected"} 2.0' in exposition


def test_a_connection_idle_for_keep_alive_s_is_closed():
    async def scenario():
        async def hello(request: HttpRequest, reply: Reply) -> None:
            reply.send(200, {"content-type": "text/plain"}, b"hi")
        routes = Routes(lambda request, status: hello, hello, lambda status, message: b"")
        routes.add("GET", "/", hello)
        server = HttpServer(routes, max_body=1024, keep_alive_s=0.2)
        port = await server.start("127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        answer = await read_response(reader)
        rest = await asyncio.wait_for(reader.read(), timeout=5)  # b"" once the server closes the connection
        writer.close()
        await server.close(grace_s=1)
        return answer, rest
    (status, _, payload), rest = run(scenario)
    assert status == "HTTP/1.1 200 OK" and payload == b"hi" and rest == b""


def test_an_http_1_0_client_gets_its_stream_unchunked_until_the_connection_closes():
    async def scenario():
        async with upstreams(Upstream("a")) as servers:
            router = await started(servers)
            reader, writer = await asyncio.open_connection("127.0.0.1", router.http_port)
            body = b'{"prompt": "x", "max_tokens": 3, "stream": true}'
            writer.write(b"POST /v1/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            answer = await asyncio.wait_for(reader.read(), timeout=10)  # to the end of the connection
            writer.close()
            await router.stop()
            return answer
    head, _, stream = run(scenario).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and b"transfer-encoding" not in head.lower()
    assert stream.startswith(b"data: {") and stream.endswith(b"data: [DONE]\n\n") and stream.count(b"data: {") == 4


def test_head_on_healthz_readyz_and_metrics_answers_their_headers_without_a_body_and_every_answer_is_dated():
    async def scenario():
        async with upstreams(Upstream("a")) as servers:
            router = await started(servers)
            reader, writer = await asyncio.open_connection("127.0.0.1", router.http_port)
            heads = []
            for path in (b"/healthz", b"/readyz", b"/metrics"):
                writer.write(b"HEAD %s HTTP/1.1\r\nHost: r\r\n\r\n" % path)
                lines = (await reader.readuntil(b"\r\n\r\n")).decode().split("\r\n")
                heads.append((lines[0], {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:] if line)}))
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: r\r\n\r\n")  # answered next: no body came between
            after = await read_response(reader)
            writer.close()
            await router.stop()
            return heads, after
    heads, (status, headers, payload) = run(scenario)
    assert [line for line, _ in heads] == ["HTTP/1.1 200 OK"] * 3
    assert all(int(h["content-length"]) > 0 and h["date"].endswith(" GMT") for _, h in heads)
    assert status == "HTTP/1.1 200 OK" and b'"servers"' in payload and headers["date"].endswith(" GMT")
