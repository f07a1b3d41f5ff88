"""The router as Envoy's endpoint picker (``headroom bench ext-proc``): scheduling decisions per CPU-second.

A simulated pool (``headroom sim serve``, scraped by the router as usual) and a router over it in its own
process, with embedded prediction by default. This process plays Envoy: ``streams`` concurrent ext_proc
streams, each exchange sending the request headers, the request body (one decision), then the response
headers and a JSON body carrying ``usage`` (the completion: telemetry and in-flight release), for
``seconds``. The result is the router's decisions per second of its own CPU time, and per wall second.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path

from headroom.benchmarks.live import load_average, start_pool, start_router


def bench_ext_proc(servers: int = 16, streams: int = 16, seconds: float = 10.0, predictor: str = "embedded",
                   profile: Path | None = None) -> dict[str, float | int | str]:
    pool, addresses = start_pool(servers)
    started_load = load_average()
    try:
        with tempfile.TemporaryDirectory(prefix="headroom-bench-ext-proc-") as scratch:
            router, port = start_router(addresses, Path(scratch), predictor=predictor, ext_proc=True, profile=profile)
            try:
                asyncio.run(_drive(port, streams, 1.0))  # warm-up: connections, caches, compiled kernels
                before, began = router.cpu, time.monotonic()
                decisions, rejected = asyncio.run(_drive(port, streams, seconds))
                cpu, wall = router.cpu - before, time.monotonic() - began
            finally:
                router.stop()
    finally:
        pool.stop()
    return {"servers": servers, "streams": streams, "predictor": predictor, "decisions": decisions,
            "rejected": rejected, "decisions_per_cpu_s": decisions / cpu if cpu else float("inf"),
            "decisions_per_s": decisions / wall, "router_cpu_ms_per_decision": 1000 * cpu / max(1, decisions),
            "load_average": f"{started_load} → {load_average()}"}


async def _drive(port: int, streams: int, seconds: float) -> tuple[int, int]:
    import grpc
    from envoy.config.core.v3 import base_pb2
    from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

    def headers(pairs: dict[str, str], end: bool) -> ep.HttpHeaders:
        return ep.HttpHeaders(headers=base_pb2.HeaderMap(headers=[
            base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]), end_of_stream=end)

    body = json.dumps({"model": "m", "prompt": "Summarize: " + "lorem ipsum " * 40, "max_tokens": 16}).encode()
    answer = json.dumps({"choices": [{"text": "x" * 16}], "usage": {"prompt_tokens": 90, "completion_tokens": 16}})
    exchange = [ep.ProcessingRequest(request_headers=headers({":path": "/v1/completions", ":method": "POST"}, False)),
                ep.ProcessingRequest(request_body=ep.HttpBody(body=body, end_of_stream=True)),
                ep.ProcessingRequest(response_headers=headers({":status": "200"}, False)),
                ep.ProcessingRequest(response_body=ep.HttpBody(body=answer.encode(), end_of_stream=True))]
    end = time.monotonic() + seconds
    counts = [0, 0]

    async def one_stream(stub: ep_grpc.ExternalProcessorStub) -> None:
        while time.monotonic() < end:
            call = stub.Process()
            for i, message in enumerate(exchange):
                await call.write(message)
                reply = await call.read()
                if reply.HasField("immediate_response"):
                    counts[1] += 1
                    break
                if i == 1:
                    counts[0] += 1
            await call.done_writing()
            await call.wait_for_connection()
            call.cancel()

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = ep_grpc.ExternalProcessorStub(channel)
        await asyncio.gather(*(one_stream(stub) for _ in range(streams)))
    return counts[0], counts[1]
