"""The predictor's gRPC server under closed-loop load (``headroom bench predictor grpc``).

One in-process server per transport — plaintext, and with ``--tls`` also TLS (a certificate from a CA made
for the run), both serving one runtime; the load comes from a separate process: ``python -m
headroom.benchmarks.predictor_grpc load ...`` (or ``load-coalesced``), or the compiled generator in
``benchmarks/grpc_load`` (Go; it costs the shared cores about a third of the CPU per call of the Python
one). With ``rounds`` above one, the transports take turns, run after run, so a noisy machine weighs on both
alike; each run records the load average when it started.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from headroom.benchmarks.live import children_cpu_seconds
from headroom.benchmarks.predictor import BENCH_TRUST, candidates, percentiles, reference_messages

if TYPE_CHECKING:
    import grpc

    from headroom.predictor.proto import prediction_pb2

Report = dict[str, object]  # a run's figures, printed as JSON

GO_LOAD_SOURCE = Path(__file__).resolve().parent / "grpc_load"
LOAD_GENERATORS = ("python", "coalescing", "go")
TRANSPORTS = ("plaintext", "tls")


def bench_grpc(candidate_counts: Sequence[int] = (100, 1000), clients: int = 4, seconds: float = 10.0, workers: int = 2,
               models: int = 4, load_generator: str = "python", threads: int = 1,
               transports: tuple[str, ...] = ("plaintext",), rounds: int = 1, rpc: str = "predict") -> list[Report]:
    """One in-process server per transport (``plaintext``, ``tls``); a separate process drives one at a time
    closed-loop with ``clients`` concurrent callers: Python threads calling the stub (``python``) or
    :class:`~predictor.client.PredictorClient` (``coalescing``), or the compiled generator's goroutines
    (``go``). ``rounds`` runs of every transport and candidate count, the transports taking turns. ``rpc``
    ``health`` calls the health check instead of Predict (the compiled generator only): the cost of the
    transport with next to no work behind it."""
    from headroom.certificates import CertificateAuthority
    from headroom.contract.settings import from_env
    from headroom.contract.tls import ServerTls
    from headroom.predictor.runtime import ModelRuntime
    from headroom.predictor.server import PredictorServer
    from headroom.predictor.settings import PredictorSettings

    if load_generator not in LOAD_GENERATORS:
        raise ValueError(f"load generator {load_generator!r}: expected one of {LOAD_GENERATORS}")
    if rpc not in RPCS or (rpc == "health" and load_generator != "go"):
        raise ValueError(f"rpc {rpc!r}: expected predict, or health with the go load generator")
    unknown = set(transports) - set(TRANSPORTS)
    if unknown:
        raise ValueError(f"transport {sorted(unknown)[0]!r}: expected one of {TRANSPORTS}")
    runtime = ModelRuntime(trust=BENCH_TRUST, threads=threads)
    for raw, _ in reference_messages()[:models]:
        runtime.apply(raw)
    with tempfile.TemporaryDirectory(prefix="headroom-grpc-load-") as scratch_dir:
        scratch = Path(scratch_dir)
        ca = CertificateAuthority.create("headroom bench CA")
        ca_file, _ = ca.write(scratch)
        cert, key = ca.issue("predictor", ("127.0.0.1", "localhost")).write(scratch, "predictor")
        tls = {"plaintext": ServerTls(), "tls": ServerTls(cert_file=cert, key_file=key)}
        servers = {transport: PredictorServer(from_env(PredictorSettings, {}, host="127.0.0.1", port=0,
                                                       metrics_port=-1, workers=workers, threads=threads,
                                                       tls=tls[transport]), kafka=None, runtime=runtime)
                   for transport in transports}
        go_binary = build_go_load(scratch) if load_generator == "go" else None
        for server in servers.values():
            server.start()
        results = []
        served_before = {transport: 0.0 for transport in transports}
        try:
            for round_index in range(rounds):
                for n in candidate_counts if rpc == "predict" else (0,):
                    for transport, server in servers.items():
                        ca_args = [str(ca_file)] if transport == "tls" else []
                        if go_binary is None:
                            command = [sys.executable, "-m", "headroom.benchmarks.predictor_grpc",
                                       "load-coalesced" if load_generator == "coalescing" else "load",
                                       server.address, str(n), str(clients), str(seconds), *ca_args]
                        else:
                            request = scratch / f"request-{n}.bin"
                            request.write_bytes(predict_request(candidates(n, seed=1)).SerializeToString()
                                                if rpc == "predict" else HEALTH_REQUEST)
                            command = [str(go_binary), "-addr", server.address, "-method", RPCS[rpc],
                                       "-request", str(request), "-clients", str(clients), "-seconds", str(seconds),
                                       *(["-ca", ca_args[0]] if ca_args else [])]
                        load_average = os.getloadavg()[0]
                        cpu_before, children_before = time.process_time(), children_cpu_seconds()
                        output = subprocess.run(command, check=True, capture_output=True, text=True,
                                                timeout=seconds + 120)
                        server_cpu = time.process_time() - cpu_before
                        result = json.loads(output.stdout.strip().splitlines()[-1])
                        served = server.metrics.requests.labels("OK")._value.get() if rpc == "predict" else \
                            served_before[transport] + result["calls"] + 50  # the generator's warm-up calls
                        result["server_cpu_ms_per_rpc"] = 1000 * server_cpu / max(1.0, served - served_before[transport])
                        if go_binary is not None:
                            result["client_cpu_ms_per_request"] = \
                                1000 * (children_cpu_seconds() - children_before) / result["calls"]
                        served_before[transport] = served
                        results.append({"round": round_index + 1, "transport": transport, "rpc": rpc,
                                        "candidates": n if rpc == "predict" else 0,
                                        "clients": clients, "server_workers": workers, "threads": threads,
                                        "models": models, "load_generator": load_generator,
                                        "load_average_1m": load_average, **result})
        finally:
            for server in servers.values():
                server.stop(grace=1.0)
    return results


PREDICT_METHOD = "/headroom.predictor.v1.PredictionService/Predict"
RPCS = {"predict": PREDICT_METHOD, "health": "/grpc.health.v1.Health/Check"}
HEALTH_REQUEST = b""  # HealthCheckRequest(service=""): every field at its default


def predict_request(rows: np.ndarray) -> prediction_pb2.PredictRequest:
    from headroom.predictor.proto import prediction_pb2

    return prediction_pb2.PredictRequest(pool_key="bench", n_features=rows.shape[1],
                                         features_f32le=rows.astype("<f4").tobytes())


def build_go_load(directory: Path) -> Path:
    """Compile ``benchmarks/grpc_load`` into ``directory`` (its modules come from the Go module proxy)."""
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("the go load generator needs the Go toolchain (`go` on PATH)")
    binary = directory / "grpc-load"
    build = subprocess.run([go, "build", "-o", str(binary), "."], cwd=GO_LOAD_SOURCE, capture_output=True,
                           text=True, timeout=600, env={**os.environ, "GOFLAGS": "-mod=mod"})
    if build.returncode != 0:
        raise RuntimeError(f"cannot build {GO_LOAD_SOURCE}: {build.stderr.strip()}")
    return binary


def _credentials(ca_file: str | None) -> grpc.ChannelCredentials | None:
    """TLS channel credentials trusting ``ca_file``; None (plaintext) without one."""
    from headroom.contract.tls import PredictorClientTls
    from headroom.tls import channel_credentials

    return channel_credentials(PredictorClientTls(ca_file=Path(ca_file))) if ca_file else None


def load_coalesced(address: str, candidates_per_call: int, clients: int, seconds: float,
                   window_seconds: float = 0.0005, ca_file: str | None = None) -> Report:
    """Closed loop through :class:`PredictorClient`: concurrent calls are merged into fewer RPCs."""
    from headroom.predictor.client import PredictorClient

    rows = candidates(candidates_per_call, seed=1)
    with PredictorClient([address], window_seconds=window_seconds, timeout_seconds=5.0,
                         credentials=_credentials(ca_file)) as client:
        for _ in range(50):
            client.predict("bench", rows)
        rpcs_before, calls_before = client.rpcs, client.calls
        samples, failed, elapsed = closed_loop(lambda: bool(client.predict("bench", rows).ok.all()), clients, seconds)
        rpcs, calls = client.rpcs - rpcs_before, client.calls - calls_before
    return {"calls_per_s": len(samples) / elapsed, "candidates_per_s": len(samples) * candidates_per_call / elapsed,
            "rpcs_per_s": rpcs / elapsed, "calls_per_rpc": calls / max(1, rpcs), "failed_calls": failed,
            "window_ms": window_seconds * 1000, **percentiles(samples)}


def load(address: str, candidates_per_call: int, clients: int, seconds: float, ca_file: str | None = None) -> Report:
    """Closed loop: each of ``clients`` threads sends its next call when the previous answer arrives."""
    import grpc

    from headroom.predictor.proto import prediction_pb2_grpc
    from headroom.tls import channel as open_channel

    request = predict_request(candidates(candidates_per_call, seed=1))
    channel = open_channel(address, _credentials(ca_file))
    stub = prediction_pb2_grpc.PredictionServiceStub(channel)
    for _ in range(50):
        stub.Predict(request, timeout=5)

    def call() -> bool:
        try:
            stub.Predict(request, timeout=5)
            return True
        except grpc.RpcError:
            return False

    samples, errors, elapsed = closed_loop(call, clients, seconds)
    channel.close()
    return {"requests_per_s": len(samples) / elapsed, "candidates_per_s": len(samples) * candidates_per_call / elapsed,
            "errors": errors, **percentiles(samples),
            "client_cpu_ms_per_request": 1000 * time.process_time() / max(1, len(samples))}


def closed_loop(call: Callable[[], bool], clients: int, seconds: float) -> tuple[list[float], int, float]:
    """Run ``call`` (True when it succeeded) back to back on ``clients`` threads for ``seconds``.

    Returns every call's latency in seconds, the number of failed calls and the elapsed wall time.
    """
    latencies: list[list[float]] = [[] for _ in range(clients)]
    failed = [0] * clients
    end = time.monotonic() + seconds

    def client(index: int) -> None:
        for _ in range(10_000_000):
            started = time.perf_counter()
            if time.monotonic() > end:
                return
            if not call():
                failed[index] += 1
            latencies[index].append(time.perf_counter() - started)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [s for per_client in latencies for s in per_client], sum(failed), time.monotonic() - started


if __name__ == "__main__" and len(sys.argv) in (6, 7) and sys.argv[1] in ("load", "load-coalesced"):
    generate = load if sys.argv[1] == "load" else load_coalesced
    print(json.dumps(generate(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]),
                              ca_file=sys.argv[6] if len(sys.argv) == 7 else None)))
