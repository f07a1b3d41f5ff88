"""A gate in front of a model server that fails on demand: the chaos run's failing and hanging servers.

``ok`` forwards completions (streamed as they come) and metrics to the server behind; ``fail`` answers
every completion with HTTP 500; ``hang`` accepts the request and never answers (until the mode changes
back, then 503). Metrics are always forwarded, so a failing gate looks as idle as its server — the case
that attracts traffic. Loopback only.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

MODES = ("ok", "fail", "hang")


class FaultGate:
    def __init__(self, backend: str):
        self.backend = backend  # host:port of the server behind
        self.mode = "ok"
        self.port = 0
        self._healed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown gate mode {mode!r}; expected one of {MODES}")
        self.mode = mode
        if mode == "hang":
            self._healed.clear()
        else:
            self._healed.set()

    async def start(self) -> FaultGate:
        self._session = aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        self.set_mode("ok")
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _metrics(self, request: web.Request) -> web.Response:
        assert self._session is not None
        async with self._session.get(f"http://{self.backend}/metrics") as upstream:
            return web.Response(body=await upstream.read(), status=upstream.status,
                                content_type=upstream.content_type)

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        if self.mode == "hang":
            await self._healed.wait()
            return web.json_response({"error": {"message": "gate was hanging"}}, status=503)
        if self.mode == "fail":
            return web.json_response({"error": {"message": "injected failure"}}, status=500)
        async with self._session.post(f"http://{self.backend}{request.path}", data=body,
                                      headers={"content-type": "application/json"}) as upstream:
            response = web.StreamResponse(status=upstream.status, headers={"content-type": upstream.content_type})
            await response.prepare(request)
            async for chunk in upstream.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

