"""Live mode: simulated servers behind real OpenAI-compatible HTTP endpoints on loopback.

Each :class:`LiveServer` runs one :class:`~sim.engine.ServerEngine` in real time: virtual time is
``time_scale`` × the wall time since start (``time_scale`` 10 runs ten times faster than a real GPU). A
driver task commits the engine's steps as their start times pass; handlers send each token when its
simulated time comes. Endpoints:

- ``POST /v1/completions`` and ``POST /v1/chat/completions`` — JSON, or SSE with ``"stream": true``
  (one token per chunk, then a chunk with ``usage``, then ``data: [DONE]``). The prompt may be text,
  token ids or chat messages (counted by :mod:`contract.prompt`); the output has ``max_tokens`` tokens
  (default 16) of filler text. The extension field ``"headroom": {"prompt_tokens": N, "hash_ids":
  [...], "output_tokens": M}`` sets exact counts and 16-token block hashes (e.g. from a trace). Every
  response carries ``"headroom": {"server_id", "ttft_ms", "tpot_ms", "e2e_ms"}`` — the simulated times.
- ``GET /metrics`` — Prometheus text (:mod:`sim.exposition`); ``GET /health`` — 200 once loaded.
- ``POST /admin/slowdown`` ``{"factor": F}`` and ``POST /admin/kv`` ``{"blocks": N}`` — regime changes: every
  later step ``F`` times slower; ``N`` KV blocks from the next step on (a request that can then never fit is
  answered 503).

:func:`serve_pool` hosts several servers in one process on consecutive ports.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from headroom.contract.prompt import chat_text, count_tokens, text_block_hashes, token_block_hashes
from headroom.errors import HeadroomError
from headroom.sim.engine import ServerEngine
from headroom.sim.exposition import CONTENT_TYPE, metrics_registry, render
from headroom.sim.profile import ServerProfile
from headroom.sim.request import SimRequest
from headroom.sim.sequence import SeqState

DEFAULT_MAX_TOKENS = 16
FILLER = " tok"


class BadRequest(HeadroomError, ValueError):
    """A request body the simulated server rejects with HTTP 400."""


class RequestDropped(HeadroomError, RuntimeError):
    """The engine dropped a request it had accepted (its KV capacity shrank below what the request needs)."""


class LiveServer:
    """One simulated server on ``host:port`` (port 0: any free port, see :attr:`port` after start)."""

    def __init__(self, profile: ServerProfile, server_id: str = "server-0", *, host: str = "127.0.0.1",
                 port: int = 0, time_scale: float = 1.0, seed: int = 0, model: str = "sim-llama-3-8b",
                 load_delay: bool = False):
        if time_scale <= 0:
            raise ValueError(f"time_scale must be positive, got {time_scale}")
        self.engine = ServerEngine(profile, server_id, seed=seed, record_tokens=True, max_jump=1)
        self.server_id, self.host, self.port, self.model = server_id, host, port, model
        self.time_scale = time_scale
        self._load_delay = profile.load_delay_s if load_delay else 0.0
        self._start = 0.0
        self._runner: web.AppRunner | None = None
        self._driver: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self._progress = asyncio.Event()
        self._dropped: dict[int, str] = {}  # id of a request the engine dropped -> why
        self._registry = metrics_registry(lambda: self.engine.snapshot(self.virtual_now()), model)

    # -- clock ----------------------------------------------------------------------------------------

    def virtual_now(self) -> float:
        return (time.monotonic() - self._start) * self.time_scale

    def _real_delay(self, virtual_t: float) -> float:
        return max(0.0, (virtual_t - self.virtual_now()) / self.time_scale)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- lifecycle ------------------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.add_routes([web.post("/v1/completions", self._completions),
                        web.post("/v1/chat/completions", self._chat),
                        web.get("/v1/models", self._models),
                        web.get("/metrics", self._metrics), web.get("/health", self._health),
                        web.post("/admin/slowdown", self._slowdown), web.post("/admin/kv", self._kv)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        self._start = time.monotonic()
        self.engine.clock = 0.0
        self._driver = asyncio.create_task(self._drive())

    async def stop(self) -> None:
        if self._driver is not None:
            self._driver.cancel()
            try:
                await self._driver
            except asyncio.CancelledError:
                pass
        if self._runner is not None:
            await self._runner.cleanup()

    async def _drive(self) -> None:
        while True:
            now = self.virtual_now()
            self.engine.advance_to(now)
            self.engine.finished.clear()
            self.engine.first_tokens.clear()
            for drop in self.engine.dropped:
                self._dropped[id(drop.request)] = drop.reason
            self.engine.dropped.clear()
            progress, self._progress = self._progress, asyncio.Event()
            progress.set()
            wake = self.engine.next_wake(now)
            self._kick.clear()
            timeout = None if wake is None else max(0.0005, (wake - now) / self.time_scale)
            try:
                await asyncio.wait_for(self._kick.wait(), timeout)
            except TimeoutError:
                pass

    # -- handlers -------------------------------------------------------------------------------------

    async def _health(self, request: web.Request) -> web.Response:
        if self.virtual_now() < self._load_delay:
            return web.json_response({"status": "loading"}, status=503)
        return web.json_response({"status": "ok"})

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.model, "object": "model",
                                                               "created": 0, "owned_by": "headroom-sim"}]})

    async def _slowdown(self, request: web.Request) -> web.Response:
        """Regime changes for demos and tests: ``{"factor": 2.0}`` makes every step twice as slow from now on."""
        try:
            body = await request.json()
            factor = body["factor"]
            if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor < 1000:
                raise ValueError(f"'factor' must be a number in (0, 1000), got {factor!r}")
        except (ValueError, KeyError, TypeError) as err:
            return web.json_response({"error": {"message": f"bad slowdown request: {err}"}}, status=400)
        self.engine.set_slowdown(float(factor), self.virtual_now())
        self._kick.set()
        return web.json_response({"server_id": self.server_id, "slowdown": float(factor)})

    async def _kv(self, request: web.Request) -> web.Response:
        """Regime changes for benchmarks and tests: ``{"blocks": 7301}`` gives the server that many KV blocks."""
        try:
            body = await request.json()
            if not isinstance(body, dict) or "blocks" not in body:
                raise ValueError("the body must be a JSON object with 'blocks'")
            blocks = body["blocks"]
            if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
                raise ValueError(f"'blocks' must be a positive integer, got {blocks!r}")
        except ValueError as err:
            return web.json_response({"error": {"message": f"bad KV capacity request: {err}"}}, status=400)
        self.engine.set_kv_capacity(blocks, self.virtual_now())
        self._kick.set()
        return web.json_response({"server_id": self.server_id, "kv_blocks": blocks})

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=render(self._registry), headers={"Content-Type": CONTENT_TYPE})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, http: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await http.json()
            sim_request = self._parse(body, chat)
        except (ValueError, BadRequest) as err:
            return web.json_response({"error": {"message": str(err), "type": "invalid_request_error"}}, status=400)
        if self.virtual_now() < self._load_delay:
            return web.json_response({"error": {"message": "model is loading", "type": "unavailable"}}, status=503)
        if not self.engine.submit(sim_request, sim_request.arrival_s):
            reason = self.engine.dropped[-1].reason
            return web.json_response({"error": {"message": reason, "type": "invalid_request_error"}}, status=400)
        seq = self.engine.newest_submitted()
        self._kick.set()
        ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        if body.get("stream"):
            return await self._stream(http, sim_request, seq, ident, chat)
        try:
            await self._wait_tokens(seq, sim_request.output_tokens)
        except RequestDropped as err:
            return web.json_response({"error": {"message": str(err), "type": "unavailable"}}, status=503)
        await asyncio.sleep(self._real_delay(seq.times[-1]))
        text = FILLER * sim_request.output_tokens
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"} if chat
                  else {"index": 0, "text": text, "finish_reason": "length", "logprobs": None})
        return web.json_response({"id": ident, "object": "chat.completion" if chat else "text_completion",
                                  "created": int(time.time()), "model": self.model, "choices": [choice],
                                  "usage": _usage(sim_request), "headroom": self._timings(sim_request, seq)})

    async def _wait_tokens(self, seq: SeqState, count: int) -> None:
        while len(seq.times) < count:
            reason = self._dropped.pop(id(seq.request), None)
            if reason is not None:
                raise RequestDropped(f"the server dropped the request: {reason}")
            await self._progress.wait()

    async def _stream(self, http: web.Request, req: SimRequest, seq: SeqState, ident: str,
                      chat: bool) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(http)
        kind = "chat.completion.chunk" if chat else "text_completion"
        created = int(time.time())

        async def send(payload: dict[str, Any]) -> None:
            await response.write(b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n")

        for i in range(req.output_tokens):
            try:
                await self._wait_tokens(seq, i + 1)
            except RequestDropped as err:
                await send({"error": {"message": str(err), "type": "unavailable"}})
                await response.write_eof()
                return response
            await asyncio.sleep(self._real_delay(seq.times[i]))
            last = i == req.output_tokens - 1
            if chat:
                delta = {"role": "assistant", "content": FILLER} if i == 0 else {"content": FILLER}
                choice = {"index": 0, "delta": delta, "finish_reason": "length" if last else None}
            else:
                choice = {"index": 0, "text": FILLER, "finish_reason": "length" if last else None, "logprobs": None}
            await send({"id": ident, "object": kind, "created": created, "model": self.model, "choices": [choice]})
        await send({"id": ident, "object": kind, "created": created, "model": self.model, "choices": [],
                    "usage": _usage(req), "headroom": self._timings(req, seq)})
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _timings(self, req: SimRequest, seq: SeqState) -> dict[str, Any]:
        times = seq.times
        tpot = (times[-1] - times[0]) * 1000.0 / (len(times) - 1) if len(times) > 1 else None
        return {"server_id": self.server_id, "ttft_ms": (times[0] - req.arrival_s) * 1000.0, "tpot_ms": tpot,
                "e2e_ms": (times[-1] - req.arrival_s) * 1000.0, "cached_tokens": seq.cached_tokens,
                "preemptions": seq.preemptions}

    def _parse(self, body: Any, chat: bool) -> SimRequest:
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        ext = body.get("headroom") or {}
        if not isinstance(ext, dict):
            raise BadRequest("'headroom' must be an object")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise BadRequest("'messages' must be a non-empty list")
            text = chat_text(messages)
            tokens, hashes = count_tokens(text), text_block_hashes(text)
        else:
            prompt = body.get("prompt", "")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if isinstance(prompt, str):
                tokens, hashes = count_tokens(prompt), text_block_hashes(prompt)
            elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
                tokens, hashes = len(prompt), token_block_hashes(prompt)
            else:
                raise BadRequest("'prompt' must be a string or a list of token ids (batches are not supported)")
        max_tokens = _positive(body.get("max_tokens", body.get("max_completion_tokens", DEFAULT_MAX_TOKENS)),
                               "max_tokens")
        tokens = _positive(ext.get("prompt_tokens", tokens), "headroom.prompt_tokens")
        output = _positive(ext.get("output_tokens", max_tokens), "headroom.output_tokens")
        if "hash_ids" in ext:
            ids = ext["hash_ids"]
            if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
                raise BadRequest("'headroom.hash_ids' must be a list of integers")
            hashes = tuple(ids)
        hashes = hashes[:tokens // 16]
        return SimRequest(str(body.get("request_id") or uuid.uuid4().hex), self.virtual_now(), tokens, output,
                       max_tokens=max_tokens, prefix_hashes=hashes, stream=bool(body.get("stream")))


def _positive(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadRequest(f"'{name}' must be a positive integer, got {value!r}")
    return value


def _usage(req: SimRequest) -> dict[str, int]:
    return {"prompt_tokens": req.prompt_tokens, "completion_tokens": req.output_tokens,
            "total_tokens": req.prompt_tokens + req.output_tokens}


async def serve_pool(profiles: Sequence[ServerProfile], *, host: str = "127.0.0.1", base_port: int = 0,
                     time_scale: float = 1.0, seed: int = 0, load_delay: bool = False) -> list[LiveServer]:
    """Start one :class:`LiveServer` per profile on consecutive ports (``base_port`` 0: any free ports)."""
    servers = []
    try:
        for i, prof in enumerate(profiles):
            server = LiveServer(prof, f"server-{i}", host=host, port=base_port + i if base_port else 0,
                                time_scale=time_scale, seed=seed + i, load_delay=load_delay)
            await server.start()
            servers.append(server)
    except BaseException:
        for server in servers:
            await server.stop()
        raise
    return servers
