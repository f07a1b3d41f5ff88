"""Trace-driven load through routers' OpenAI-compatible proxies, measured as a client sees it.

Each :class:`~sim.request.SimRequest` is sent at its arrival time (bounded by a count and a wall-clock
limit) as a ``/v1/completions`` call carrying the trace's exact token counts and prefix block hashes in
the ``headroom`` extension, with the routing headers a :class:`Mix` assigns it — to every :class:`Arm` at
once, each with headers of its own on top, so the arms see the same arrival stream. TTFT is measured at
the first streamed token, TPOT over the remaining tokens (counted from ``usage``), E2E at the end. A stream
still running at the client's time limit (:data:`TIME_LIMIT_S`) is judged by what it streamed until then: its
TTFT, and its TPOT over the tokens seen.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

import aiohttp

from headroom.router.control.headers import PRIORITY, SLO_TPOT, SLO_TTFT
from headroom.router.fronts.proxy import SERVER_HEADER
from headroom.sim.request import SimRequest

TIME_LIMIT_S = 120.0  # a request's whole time, as the client waits for it


@dataclass(frozen=True)
class Mix:
    """How requests are dressed: streaming share, share of streams with SLO headers, sheddable share, SLOs."""

    slo_share: float = 0.6  # of the streaming requests
    stream_share: float = 0.7
    sheddable_share: float = 0.2  # of the SLO requests
    slo_ttft_ms: float = 400.0
    slo_tpot_ms: float = 20.0
    seed: int = 7


@dataclass(frozen=True)
class Arm:
    """A router the load goes through, and the headers its requests carry besides the mix's."""

    name: str
    base_url: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ClientOutcome:
    arm: str
    request_id: str
    sent_at: float  # seconds since the load started
    status: int  # HTTP status; 0 when the connection failed
    stream: bool
    has_slo: bool
    ttft_ms: float | None = None  # for non-streaming requests: the E2E latency
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    output_tokens: int = 0
    slo_met: bool | None = None
    error: str = ""
    server: str = ""  # the server the router placed it on (its x-headroom-server header), when it says


def dress(requests: Sequence[SimRequest], mix: Mix) -> list[tuple[SimRequest, dict[str, str]]]:
    """The requests with their stream flag and routing headers decided by ``mix`` (seeded)."""
    rng = random.Random(mix.seed)
    dressed = []
    for request in requests:
        headers: dict[str, str] = {}
        stream = rng.random() < mix.stream_share
        if stream and rng.random() < mix.slo_share:  # SLOs are for streaming clients (TTFT means E2E otherwise)
            headers[SLO_TTFT[0]] = f"{mix.slo_ttft_ms:g}"
            headers[SLO_TPOT[0]] = f"{mix.slo_tpot_ms:g}"
            if rng.random() < mix.sheddable_share:
                headers[PRIORITY] = "-1"
        dressed.append((replace(request, stream=stream), headers))
    return dressed


def as_headed(dressed: Sequence[tuple[SimRequest, dict[str, str]]]) -> list[SimRequest]:
    """Each dressed request as the simulator routes it: with the SLOs and priority its headers carry, and none
    without them."""
    out = []
    for request, headers in dressed:
        slo = (float(headers[SLO_TTFT[0]]), float(headers[SLO_TPOT[0]])) if SLO_TTFT[0] in headers else (None, None)
        out.append(replace(request, slo_ttft_ms=slo[0], slo_tpot_ms=slo[1], priority=int(headers.get(PRIORITY, 0))))
    return out


async def drive(arms: Sequence[Arm], dressed: Sequence[tuple[SimRequest, dict[str, str]]], *, max_seconds: float,
                on_outcome: Callable[[ClientOutcome], None], max_in_flight: int = 512) -> list[ClientOutcome]:
    """Send every request at its arrival time (until ``max_seconds``) to every arm; returns the outcomes in
    send order."""
    limit = asyncio.Semaphore(max_in_flight * len(arms))
    connector = aiohttp.TCPConnector(limit=max_in_flight * len(arms))
    timeout = aiohttp.ClientTimeout(total=TIME_LIMIT_S)
    began = time.monotonic()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        tasks: list[asyncio.Task[ClientOutcome]] = []

        def reported(task: asyncio.Task[ClientOutcome]) -> None:
            if not task.cancelled():
                on_outcome(task.result())

        for request, headers in dressed:
            wait = request.arrival_s - (time.monotonic() - began)
            if request.arrival_s > max_seconds:
                break
            if wait > 0:
                await asyncio.sleep(wait)
            for arm in arms:
                task = asyncio.create_task(_one(session, arm, request, {**headers, **dict(arm.headers)}, began,
                                                limit))
                task.add_done_callback(reported)
                tasks.append(task)
        return list(await asyncio.gather(*tasks))


async def _one(session: aiohttp.ClientSession, arm: Arm, request: SimRequest, headers: dict[str, str], began: float,
               limit: asyncio.Semaphore) -> ClientOutcome:
    async with limit:
        sent = time.monotonic()
        body = {"model": "demo", "prompt": "", "max_tokens": request.output_tokens, "stream": request.stream,
                "request_id": request.request_id,
                "headroom": {"prompt_tokens": request.prompt_tokens, "output_tokens": request.output_tokens,
                             "hash_ids": list(request.prefix_hashes)}}
        if request.stream:
            body["stream_options"] = {"include_usage": True}
        has_slo = SLO_TTFT[0] in headers
        outcome = partial(ClientOutcome, arm.name, request.request_id, sent - began, stream=request.stream,
                          has_slo=has_slo)
        seen = _Streamed()
        cut = ""
        try:
            async with session.post(f"{arm.base_url}/v1/completions", json=body, headers=headers) as response:
                outcome = partial(outcome, server=response.headers.get(SERVER_HEADER, ""))
                if response.status != 200:
                    text = (await response.text())[:200]
                    return outcome(status=response.status, error=text)
                if request.stream:
                    await _read_stream(response, seen)
                    first, last, tokens = seen.first, seen.last, seen.usage_tokens
                else:
                    payload = await response.json()
                    first = last = time.monotonic()
                    tokens = payload.get("usage", {}).get("completion_tokens", 0)
        except TimeoutError as err:
            if seen.first is None:
                return outcome(status=0, error=f"{type(err).__name__}: {err}")
            first, last, tokens = seen.first, seen.last, seen.texts  # cut while streaming: judged on what came
            cut = f"cut at the client's {TIME_LIMIT_S:g}-s limit after {tokens} tokens"
        except aiohttp.ClientError as err:
            return outcome(status=0, error=f"{type(err).__name__}: {err}")
        except RuntimeError as err:  # aiohttp's answer to reading a stream whose connection closed (on Ctrl-C)
            if str(err) != "Connection closed.":
                raise
            return outcome(status=0, error=f"{type(err).__name__}: {err}")
        if first is None or last is None:
            return outcome(status=200, error="stream carried no token")
        ttft = (first - sent) * 1000
        tpot = (last - first) * 1000 / (tokens - 1) if request.stream and tokens > 1 else None
        met = None
        if has_slo:
            met = ttft <= float(headers[SLO_TTFT[0]]) and (
                tpot is None or SLO_TPOT[0] not in headers or tpot <= float(headers[SLO_TPOT[0]]))
        return outcome(status=200, ttft_ms=ttft, tpot_ms=tpot, e2e_ms=(last - sent) * 1000, output_tokens=tokens,
                       slo_met=met, error=cut)


@dataclass
class _Streamed:
    """What a stream showed so far: its first and last text event's times, how many, and ``usage``'s count."""
    first: float | None = None
    last: float | None = None
    texts: int = 0
    usage_tokens: int = 0


async def _read_stream(response: aiohttp.ClientResponse, seen: _Streamed) -> None:
    async for line in response.content:
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
            continue
        event = json.loads(line[6:])
        if any(choice.get("text") for choice in event.get("choices", [])):
            now = time.monotonic()
            seen.first = seen.first or now
            seen.last = now
            seen.texts += 1
        usage = event.get("usage")
        if usage:
            seen.usage_tokens = usage.get("completion_tokens", seen.usage_tokens)

