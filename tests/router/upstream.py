"""A minimal real OpenAI-compatible model server for router tests (aiohttp, on 127.0.0.1).

Streams ``max_tokens`` tokens (default 6) from ``first_token_delay_s`` after the headers, ``tokens_per_chunk``
per SSE chunk, ``token_delay_s`` apart, ends with a ``usage`` chunk when asked (``stream_options.include_usage``),
serves vLLM metrics and lists its ``models`` at ``/v1/models``. Every answer carries an ``x-request-id``
and rate-limit headers, as hosted OpenAI-compatible servers send, and ``response_headers`` besides. Faults
on demand: ``fail_status`` answers every completion with that status (and ``fail_body``, when given),
``hang`` never answers, ``head_delay_s`` sends a stream's headers that late, ``stall_after`` falls silent
after that many chunks of a stream, ``die_after`` drops the connection after that many (as a server process
that dies), ``truncated_json`` ends a 200 JSON answer cleanly half way through its document, ``hang_models``
never answers ``/v1/models``.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import asynccontextmanager

from aiohttp import web


class Upstream:
    def __init__(self, name: str, *, waiting: int = 0, running: int = 0, kv: float = 0.1,
                 tokens_per_chunk: int = 1, token_delay_s: float = 0.002, first_token_delay_s: float = 0.0,
                 models: tuple[str, ...] = ("m",), fail_status: int | None = None, hang: bool = False,
                 response_headers: dict | None = None, fail_body: bytes | None = None,
                 stall_after: int | None = None, hang_models: bool = False, head_delay_s: float = 0.0,
                 die_after: int | None = None, truncated_json: bool = False):
        self.name = name
        self.waiting, self.running, self.kv = waiting, running, kv
        self.tokens_per_chunk = tokens_per_chunk
        self.token_delay_s = token_delay_s
        self.first_token_delay_s = first_token_delay_s
        self.models = models
        self.fail_status, self.hang = fail_status, hang
        self.fail_body, self.stall_after, self.hang_models = fail_body, stall_after, hang_models
        self.head_delay_s = head_delay_s
        self.die_after, self.truncated_json = die_after, truncated_json
        self.response_headers = response_headers or {}
        self.received: list[tuple[str, dict, dict]] = []  # (path, headers, body)
        self.peers: list[tuple] = []  # the address each request came from (one per connection kept alive)
        self._stopping = asyncio.Event()  # lets a hanging handler go when the server stops
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> Upstream:
        app = web.Application()
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=(
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{model_name="m"}} {self.waiting}\n'
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{model_name="m"}} {self.running}\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f'vllm:kv_cache_usage_perc{{model_name="m"}} {self.kv}\n'))

    async def _models(self, request: web.Request) -> web.Response:
        if self.hang_models:
            await self._stopping.wait()
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model", "owned_by": self.name}
                                                             for m in self.models]})

    def _headers(self) -> dict[str, str]:
        return {"x-request-id": f"{self.name}-{len(self.received)}", "x-ratelimit-remaining-requests": "99",
                "server": "upstream-test", "x-internal-trace": "not for clients", **self.response_headers}

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.received.append((request.path, request.headers.copy(), body))
        self.peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        if self.hang:
            await self._stopping.wait()
            return web.Response(status=503)
        if self.fail_status is not None and self.fail_body is not None:
            return web.Response(body=self.fail_body, status=self.fail_status, content_type="application/json")
        if self.fail_status is not None:
            return web.json_response({"error": {"message": "engine dead"}}, status=self.fail_status)
        tokens = body.get("max_tokens") or 6
        chat = request.path.endswith("chat/completions")
        usage = {"prompt_tokens": 11, "completion_tokens": tokens, "total_tokens": 11 + tokens}
        if not body.get("stream"):
            await asyncio.sleep(self.token_delay_s * tokens)
            text = "tok" * tokens
            choice = {"index": 0, "message": {"role": "assistant", "content": text}} if chat else {"index": 0, "text": text}
            if self.truncated_json:
                whole = json.dumps({"id": "x", "object": "completion", "choices": [choice], "usage": usage})
                return web.Response(body=whole[:len(whole) // 2].encode(), content_type="application/json")
            return web.json_response({"id": "x", "object": "completion", "choices": [choice], "usage": usage},
                                     headers=self._headers())
        response = web.StreamResponse(headers={"content-type": "text/event-stream", **self._headers()})
        await asyncio.sleep(self.head_delay_s)
        await response.prepare(request)
        await asyncio.sleep(self.first_token_delay_s)
        sent = 0
        while sent < tokens:
            if self.stall_after is not None and sent >= self.stall_after * self.tokens_per_chunk:
                await self._stopping.wait()
                return response
            if self.die_after is not None and sent >= self.die_after * self.tokens_per_chunk:
                assert request.transport is not None
                request.transport.abort()  # the connection is gone, its chunked body never ended
                return response
            n = min(self.tokens_per_chunk, tokens - sent)
            piece = "tok" * n
            choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            await response.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
            sent += n
            await asyncio.sleep(self.token_delay_s)
        if (body.get("stream_options") or {}).get("include_usage"):
            await response.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


@asynccontextmanager
async def upstreams(*servers: Upstream):
    for s in servers:
        await s.start()
    try:
        yield servers
    finally:
        for s in servers:
            await s.stop()
