"""The router as Envoy's endpoint picker (``headroom bench ext-proc``): scheduling decisions per CPU-second.

A simulated pool (``headroom sim serve``, scraped by the router as usual) and a router over it in its own
process, with embedded prediction by default. This process plays Envoy in the reference's configuration (the
Gateway API Inference Extension's Envoy config streams both bodies, ``FULL_DUPLEX_STREAMED``, with header and
trailer messages sent): ``streams`` concurrent ext_proc streams, each exchange sending the request headers
(announcing the mode) and the request body without waiting, then reading the headers' answer (one decision) and
the body handed back; then the response headers and a JSON body carrying ``usage`` (the completion: telemetry
and in-flight release), each answered — the body handed back — for ``seconds``. The result is the router's
decisions per second of its own CPU time, and per wall second.

Four messages is the fewest Envoy sends per request in that configuration (request headers, at least one
request body chunk, response headers, at least one response body chunk); a streamed response sends one more
message per chunk. ``exchange_messages(duplex=False)`` is the same exchange with a buffered request body (the
``--floor`` servicers answer every message at once, as in that mode).
"""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headroom.benchmarks.live import build_go, load_average, start_pool, start_router

STALL_S = 30.0  # beyond its seconds, a drive whose answers stop coming fails
EXT_PROC_LOAD_SOURCE = Path(__file__).resolve().parent / "ext_proc_load"


def bench_ext_proc(servers: int = 16, streams: int = 16, seconds: float = 10.0, predictor: str = "embedded",
                   profile: Path | None = None, scrape_interval_s: float = 0.05,
                   front: str = "native") -> dict[str, float | int | str]:
    pool, addresses = start_pool(servers)
    started_load = load_average()
    try:
        with tempfile.TemporaryDirectory(prefix="headroom-bench-ext-proc-") as scratch:
            router, port = start_router(addresses, Path(scratch), predictor=predictor, ext_proc=True, profile=profile,
                                        scrape_interval_s=scrape_interval_s, ext_proc_front=front)
            try:
                asyncio.run(drive(port, streams, 1.0))  # warm-up: connections, caches, compiled kernels
                before, began = router.cpu, time.monotonic()
                driven = asyncio.run(drive(port, streams, seconds))
                exchanges, rejected = driven.streams, driven.refused
                cpu, wall = router.cpu - before, time.monotonic() - began
            finally:
                router.stop()
    finally:
        pool.stop()
    decisions = exchanges - rejected
    return {"servers": servers, "streams": streams, "predictor": predictor, "front": front,
            "scrape_interval_s": scrape_interval_s,
            "decisions": decisions,
            "rejected": rejected, "decisions_per_cpu_s": decisions / cpu if cpu else float("inf"),
            "decisions_per_s": decisions / wall, "router_cpu_ms_per_decision": 1000 * cpu / max(1, decisions),
            "load_average": f"{started_load} → {load_average()}"}


def exchange_messages(duplex: bool = True) -> list[Any]:
    """What Envoy sends for one completion request: request headers and body, response headers and a JSON body
    with ``usage``; the first message announces ``FULL_DUPLEX_STREAMED`` bodies (``duplex``) or a ``BUFFERED``
    request body."""
    from envoy.config.core.v3 import base_pb2
    from envoy.service.ext_proc.v3 import external_processor_pb2 as ep

    from headroom.router.fronts.ext_proc_answers import FULL_DUPLEX, MODES

    def headers(pairs: dict[str, str]) -> ep.HttpHeaders:
        return ep.HttpHeaders(headers=base_pb2.HeaderMap(headers=[
            base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]))

    body = json.dumps({"model": "m", "prompt": "Summarize: " + "lorem ipsum " * 40, "max_tokens": 16}).encode()
    answer = json.dumps({"choices": [{"text": "x" * 16}], "usage": {"prompt_tokens": 90, "completion_tokens": 16}})
    first = ep.ProcessingRequest(request_headers=headers({":path": "/v1/completions", ":method": "POST"}))
    first.protocol_config.request_body_mode = FULL_DUPLEX if duplex else MODES.BUFFERED
    first.protocol_config.response_body_mode = FULL_DUPLEX if duplex else MODES.STREAMED
    return [first, ep.ProcessingRequest(request_body=ep.HttpBody(body=body, end_of_stream=True)),
            ep.ProcessingRequest(response_headers=headers({":status": "200"})),
            ep.ProcessingRequest(response_body=ep.HttpBody(body=answer.encode(), end_of_stream=True))]


def answers_awaited(messages: Sequence[Any]) -> list[int]:
    """How many answers Envoy reads after sending each of ``messages``: one each, except in full duplex, where
    the request headers' answer comes with the request body's end."""
    from headroom.router.fronts.ext_proc_answers import FULL_DUPLEX

    duplex = bool(messages) and messages[0].protocol_config.request_body_mode == FULL_DUPLEX
    if not duplex:
        return [1] * len(messages)
    return [0 if m.HasField("request_headers") and not m.request_headers.end_of_stream
            else 2 if m.HasField("request_body") and m.request_body.end_of_stream else 1 for m in messages]


@dataclass
class Driven:
    """What :func:`drive` or :func:`drive_go` did: streams completed, how many of them were answered with an
    immediate response, and the decision latency's p50 and p99 (ms): from a stream's first message to the answer
    that routes it — the request headers' answer in full duplex, the request body's when buffered — as Envoy
    waits for it."""

    streams: int = 0
    refused: int = 0
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")


async def drive(port: int, streams: int, seconds: float, messages: Sequence[Any] | None = None) -> Driven:
    """``streams`` concurrent ext_proc streams, one after another for ``seconds``, each sending ``messages``
    (default :func:`exchange_messages`) as Envoy does, reading the answers it awaits after each
    (:func:`answers_awaited`), then half-closing it."""
    import grpc
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

    exchange = list(messages or exchange_messages())
    awaited = answers_awaited(exchange)
    decided = next((i for i, m in enumerate(exchange) if m.HasField("request_body") and m.request_body.end_of_stream),
                   0)  # the answers read after this message route the request
    steps = list(zip(exchange, awaited, strict=True))
    end = time.monotonic() + seconds
    driven, latencies = Driven(), []

    async def one_stream(stub: ep_grpc.ExternalProcessorStub) -> None:
        while time.monotonic() < end:
            call = stub.Process()
            began = time.perf_counter()
            for i, (message, count) in enumerate(steps):
                await call.write(message)
                refused = False
                for n in range(count):
                    answer = await call.read()
                    if i == decided and n == 0:
                        latencies.append(1000 * (time.perf_counter() - began))
                    refused = refused or answer.HasField("immediate_response")
                if refused:
                    driven.refused += 1
                    break
            driven.streams += 1
            await call.done_writing()  # as Envoy ends a stream: half-closed, then the server's status awaited
            await call.code()

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = ep_grpc.ExternalProcessorStub(channel)
        await asyncio.wait_for(asyncio.gather(*(one_stream(stub) for _ in range(streams))), seconds + STALL_S)
    if latencies:
        latencies.sort()
        driven.p50_ms, driven.p99_ms = latencies[len(latencies) // 2], latencies[int(0.99 * (len(latencies) - 1))]
    return driven


def drive_go(port: int, streams: int, seconds: float, messages: Sequence[Any] | None = None) -> Driven:
    """:func:`drive`'s load from the compiled client in ``ext_proc_load/`` (grpc-go, messages passed through as
    bytes), which costs the shared cores a fraction of the Python client's CPU per exchange: on a small host
    the Python client, not the server, may set the pace."""
    binary = build_go(EXT_PROC_LOAD_SOURCE, "ext-proc-load")
    exchange = list(messages or exchange_messages())
    awaited = answers_awaited(exchange)
    decided = next((i for i, m in enumerate(exchange) if m.HasField("request_body") and m.request_body.end_of_stream),
                   0)
    with tempfile.NamedTemporaryFile(prefix="ext-proc-exchange-") as file:
        for message in exchange:
            data = message.SerializeToString()
            file.write(struct.pack(">I", len(data)) + data)
        file.flush()
        done = subprocess.run([str(binary), "-addr", f"127.0.0.1:{port}", "-messages", file.name, "-awaited",
                               ",".join(map(str, awaited)), "-decided", str(decided), "-streams", str(streams),
                               "-seconds", str(seconds), "-warmup", "0"], capture_output=True, text=True,
                              timeout=seconds + STALL_S + 60)
    if done.returncode != 0:
        raise RuntimeError(f"ext_proc_load failed: {done.stderr.strip()[-2000:]}")
    result = json.loads(done.stdout)
    return Driven(result["streams"], result["refused"], result["p50_ms"], result["p99_ms"])


async def routed_to(port: int) -> str | None:
    """The destination one exchange on ``port`` is routed to (None: refused or not routed)."""
    import grpc
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

    from headroom.router.fronts.ext_proc_answers import DESTINATION_HEADER

    first, body = exchange_messages()[:2]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = ep_grpc.ExternalProcessorStub(channel).Process()
        await call.write(first)
        await call.write(body)
        answer = await asyncio.wait_for(call.read(), 10)
        call.cancel()
    for option in answer.request_headers.response.header_mutation.set_headers:
        if option.header.key == DESTINATION_HEADER:
            return str(option.header.raw_value.decode())
    return None


def wait_routed(port: int, timeout_s: float = 60.0) -> str:
    """Wait until an exchange on ``port`` is routed to a server (an endpoint picker that has seen the pool's
    metrics); returns the destination."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            destination = asyncio.run(routed_to(port))
        except Exception:  # not serving yet: any failure is retried until the deadline
            destination = None
        if destination:
            return destination
        if time.monotonic() > deadline:
            raise RuntimeError(f"the ext_proc server on port {port} routed nothing within {timeout_s:.0f} s")
        time.sleep(0.5)
