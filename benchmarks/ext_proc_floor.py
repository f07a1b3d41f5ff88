"""What grpcio costs per ext_proc exchange before any scheduling (``headroom bench ext-proc --floor``).

An ext_proc servicer that answers every message with an empty response runs in its own process
(``python -m headroom.benchmarks.ext_proc_floor VARIANT PORT``), served one of several ways (:data:`VARIANTS`:
how the servicer reads and writes, the server's options, gRPC core experiments, the event loop; and, for
comparison, grpc-go: ``benchmarks/ext_proc_go``, built with the Go toolchain). This process
drives it with :func:`benchmarks.ext_proc.drive` — the bench's four-message exchange over 16 streams, and for
the first variant also streams of one and eight messages, which split the cost into a per-stream and a
per-message part — in interleaved rounds, and reports the servicer's CPU time per stream.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headroom.benchmarks.ext_proc import drive, exchange_messages
from headroom.benchmarks.live import build_go, cpu_seconds, load_average
from headroom.errors import CommandError
from headroom.ports import free_port

SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"


@dataclass(frozen=True)
class Variant:
    style: str = "iterator"  # iterator: `async for` over the requests (the router's); read-write: context.read/write;
    # raw-bytes: a generic handler without protobuf, answering with bytes serialized once; sync: grpc.server threads;
    # go: grpc-go (benchmarks/ext_proc_go), for comparison
    options: tuple[tuple[str, int | str], ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    loop: str = "uvloop"


VARIANTS = {
    "iterator": Variant(),
    "read-write": Variant("read-write"),
    "raw-bytes": Variant("raw-bytes"),
    "asyncio-loop": Variant(loop="asyncio"),
    "sync-server": Variant("sync"),
    "throughput-target": Variant(options=(("grpc.optimization_target", "throughput"),)),
    "no-bdp-no-keepalive": Variant(options=(("grpc.http2.bdp_probe", 0), ("grpc.keepalive_time_ms", 2**31 - 1))),
    "no-reuseport": Variant(options=(("grpc.so_reuseport", 0),)),
    "max-streams-1000": Variant(options=(("grpc.max_concurrent_streams", 1000),)),
    "iomgr-listener": Variant(env={"GRPC_EXPERIMENTS": "-event_engine_listener"}),
    "go-grpc": Variant("go"),
}
GO_SOURCE = Path(__file__).resolve().parent / "ext_proc_go"


def bench_floor(names: Sequence[str], rounds: int = 3, seconds: float = 4.0, streams: int = 16) -> dict[str, object]:
    """Each variant in ``names`` run ``rounds`` times, interleaved; the median CPU ms per four-message stream, and
    for the first variant the per-stream and per-message parts."""
    go_servicer = _go_servicer(names)
    exchange = exchange_messages(duplex=False)  # an empty servicer answers every message at once
    runs = [(name, exchange) for name in names]
    runs += [(f"{names[0]} ×1", exchange[:1]), (f"{names[0]} ×8", exchange * 2)]
    started = load_average()
    samples: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, messages in runs:
            samples.setdefault(name, []).append(_cpu_ms_per_stream(name.split(" ")[0], messages, seconds, streams,
                                                                   go_servicer))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    per_message = (medians[f"{names[0]} ×8"] - medians[f"{names[0]} ×1"]) / 7
    return {"cpu_ms_per_exchange": {name: round(medians[name], 3) for name in names},
            "samples": {name: [round(v, 3) for v in values] for name, values in samples.items()},
            "split": {"variant": names[0], "per_stream_ms": round(medians[f"{names[0]} ×1"] - per_message, 3),
                      "per_message_ms": round(per_message, 3)},
            "load_average": f"{started} → {load_average()}"}


def _go_servicer(names: Sequence[str]) -> Path | None:
    """grpc-go's servicer, built before any round when a variant in ``names`` is served by it."""
    go_names = [name for name in names if VARIANTS[name].style == "go"]
    if not go_names:
        return None
    try:
        return build_go(GO_SOURCE, "ext_proc_go")
    except RuntimeError as err:
        raise CommandError(f"--floor variant {go_names[0]} cannot run: {err}; name the other variants to leave "
                           "it out") from None


def _cpu_ms_per_stream(name: str, messages: Sequence[object], seconds: float, streams: int,
                       go_servicer: Path | None) -> float:
    port = free_port()
    command = ([str(go_servicer)] if VARIANTS[name].style == "go"
               else [sys.executable, "-m", "headroom.benchmarks.ext_proc_floor", name])
    with subprocess.Popen([*command, str(port)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                          env={**os.environ, **VARIANTS[name].env}) as popen:
        try:
            if popen.stdout is None or popen.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the {name} servicer exited with code {popen.wait()}")
            asyncio.run(drive(port, streams, 0.5, messages))  # warm-up
            before = cpu_seconds(popen.pid)
            done = asyncio.run(drive(port, streams, seconds, messages)).streams
            return 1000 * (cpu_seconds(popen.pid) - before) / max(1, done)
        finally:
            popen.terminate()


def serve(name: str, port: int) -> None:
    """Serve the empty servicer of variant ``name`` on ``port`` until terminated."""
    import grpc
    from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
    from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

    variant = VARIANTS[name]
    empty = ep.ProcessingResponse()

    class Iterating(ep_grpc.ExternalProcessorServicer):  # type: ignore[misc]  # an untyped generated base
        async def Process(self, requests: Any, context: Any) -> Any:
            async for _ in requests:
                yield empty

    class ReadWriting(ep_grpc.ExternalProcessorServicer):  # type: ignore[misc]  # an untyped generated base
        async def Process(self, requests: Any, context: Any) -> Any:
            while await context.read() is not grpc.aio.EOF:
                await context.write(empty)

    class Threaded(ep_grpc.ExternalProcessorServicer):  # type: ignore[misc]  # an untyped generated base
        def Process(self, requests: Any, context: Any) -> Any:
            for _ in requests:
                yield empty

    async def raw(requests: Any, context: Any) -> Any:
        answer = empty.SerializeToString()
        async for _ in requests:
            yield answer

    if variant.style == "sync":
        from concurrent.futures import ThreadPoolExecutor
        server = grpc.server(ThreadPoolExecutor(32), options=list(variant.options))
        ep_grpc.add_ExternalProcessorServicer_to_server(Threaded(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        print("ready", flush=True)
        server.wait_for_termination()
        return

    async def main() -> None:
        server = grpc.aio.server(options=list(variant.options))
        if variant.style == "raw-bytes":
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
                SERVICE, {"Process": grpc.stream_stream_rpc_method_handler(raw)}),))
        else:
            servicer = ReadWriting() if variant.style == "read-write" else Iterating()
            ep_grpc.add_ExternalProcessorServicer_to_server(servicer, server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        print("ready", flush=True)
        await server.wait_for_termination()

    if variant.loop == "uvloop":
        import uvloop
        uvloop.run(main())
    else:
        asyncio.run(main())


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]))
