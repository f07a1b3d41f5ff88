"""The router's own work per ext_proc exchange, without gRPC (``headroom bench ext-proc --in-process``).

:meth:`router.fronts.ext_proc.ExtProcServicer.Process` driven directly, in this process, with the four full-duplex
messages of :func:`benchmarks.ext_proc.exchange_messages` (each parsed from its bytes and each answer serialized, as gRPC
would): header parsing, body parsing, the decision over ``servers`` servers with embedded prediction (the
models of ``headroom bench router``), metering and the completion (metrics, telemetry record). Servers are
re-scraped every ``SCRAPE_EVERY`` exchanges, as the router's scraper would. Beside ``--floor`` (what grpcio
costs per exchange), this is the other part of a live decision's CPU time.

With ``front="native"``, the event loop's side of the compiled front instead (:class:`router.fronts.ext_proc_front.
NativeExtProc`): the events the front hands over for the same exchange — the request to schedule, with its
headers and body, then the response's end with its JSON body — each answered as the front would be.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from typing import Any

from headroom.benchmarks.ext_proc import exchange_messages
from headroom.benchmarks.live import load_average

SCRAPE_EVERY = 200


def bench_in_process(servers: int = 16, exchanges: int = 20_000, predictor: str = "embedded",
                     front: str = "grpcio", decision: str = "compiled") -> dict[str, object]:
    from envoy.service.ext_proc.v3 import external_processor_pb2 as ep

    from headroom.benchmarks.router import embedded_predictor
    from headroom.contract.server_metrics import ServerMetrics
    from headroom.router.control.metrics import RouterMetrics
    from headroom.router.control.service import RouterService
    from headroom.router.control.telemetry_sink import MemoryTelemetry
    from headroom.router.framework.engine import Engine
    from headroom.router.framework.pipeline import load_pipeline
    from headroom.router.fronts.ext_proc import ExtProcServicer
    from headroom.router.state.pool import PoolState
    from headroom.router.state.servers import ServerSpec

    rng = random.Random(0)
    specs = tuple(ServerSpec(f"s{i}", f"127.0.0.1:{8000 + i}") for i in range(servers))
    pool = PoolState(specs)

    def scrape() -> None:
        for spec in specs:
            pool.scraped(spec.server_id, ServerMetrics(rng.uniform(0, 0.9), rng.randrange(8), rng.randrange(1, 40)),
                         time.monotonic())

    service = RouterService(Engine(load_pipeline(None), compiled=decision == "compiled"), pool, MemoryTelemetry(limit=1), RouterMetrics(),
                            predictor=embedded_predictor() if predictor == "embedded" else None, rng=rng)
    servicer = ExtProcServicer(service)
    raw = [message.SerializeToString() for message in exchange_messages()]

    async def requests() -> AsyncIterator[Any]:
        for message in raw:
            yield ep.ProcessingRequest.FromString(message)

    refused = [0]

    async def _servicer_run(count: int) -> float:
        started = time.process_time()
        for i in range(count):
            if i % SCRAPE_EVERY == 0:
                scrape()
            async for answer in servicer.Process(requests(), None):
                answer.SerializeToString()
                refused[0] += answer.HasField("immediate_response")
        return time.process_time() - started

    run = _native_run(service, raw, scrape, refused) if front == "native" else _servicer_run
    load = load_average()
    asyncio.run(run(500))  # warm-up: caches, compiled kernels
    refused[0] = 0
    cpu = asyncio.run(run(exchanges))
    return {"servers": servers, "predictor": predictor, "front": front, "decision": decision, "exchanges": exchanges, "refused": refused[0],
            "cpu_ms_per_exchange": round(1000 * cpu / exchanges, 4), "exchanges_per_cpu_s": round(exchanges / cpu),
            "load_average": f"{load} → {load_average()}"}


class _Answers:
    """What the compiled front does with the event loop's answers, here: counts the refusals."""

    def __init__(self, refused: list[int]):
        self.refused = refused

    def answer(self, token: int, answer: bytes, routed: bool, stream: bool) -> bool:
        self.refused[0] += not routed
        return True


def _native_run(service: Any, raw: list[bytes], scrape: Any, refused: list[int]) -> Any:
    from envoy.service.ext_proc.v3 import external_processor_pb2 as ep

    from headroom.router.fronts.ext_proc_front import NativeExtProc

    front = NativeExtProc(service)
    front._front = _Answers(refused)
    first, body, _, answer = (ep.ProcessingRequest.FromString(message) for message in raw)
    headers = {h.key.lower(): h.value or h.raw_value.decode() for h in first.request_headers.headers.headers}

    async def run(count: int) -> float:
        started = time.process_time()
        for token in range(count):
            if token % SCRAPE_EVERY == 0:
                scrape()
            front._decide(token, dict(headers), body.request_body.body, False, True, True)
            front._finish(token, False, False, answer.response_body.body)
        return time.process_time() - started

    return run
