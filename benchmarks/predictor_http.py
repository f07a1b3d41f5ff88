"""llm-d's prediction API over HTTP next to the gRPC API, on one server and the same models
(``headroom bench predictor http``).

One in-process :class:`~predictor.server.PredictorServer` serves both; a separate process drives one of them
at a time closed-loop with ``clients`` concurrent callers, and the APIs take turns (``rounds`` each,
interleaved) so the shared machine's noise falls on both alike. Per round: calls per second, the callers'
p50 / p99 latency, and the server's CPU per call (the server process's CPU time over the calls it answered).
The APIs: ``/predict/bulk/strict`` with llm-d's JSON rows (``http``), gRPC with packed feature rows (``grpc``,
the router's path) and gRPC with raw columns (``grpc-raw``); with ``reference`` (a Python with its
requirements), the same ``/predict/bulk/strict`` calls to llm-d's own prediction server
(:mod:`benchmarks.llmd_reference`), trained on these rows, in the same interleaved rounds (``reference``: its
one uvicorn process's CPU time over the calls it answered).
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from headroom.benchmarks.predictor import BENCH_TRUST, candidates, reference_messages
from headroom.benchmarks.predictor_grpc import closed_loop, predict_request
from headroom.contract.features import RAW_COLUMNS
from headroom.llmd_terms import RAW_COLUMN_OF

APIS = ("grpc", "http", "grpc-raw")
REFERENCE = "reference"  # llm-d's prediction server, with --reference
_FIELD_OF = {column: field for field, column in RAW_COLUMN_OF.items()}
_FRACTIONS = {"kv_cache_percentage", "prefix_cache_score"}


Row = dict[str, Any]  # a JSON object: a round's figures, as the load process prints them


def llmd_rows(n: int, seed: int = 1) -> list[dict[str, float]]:
    """The benchmark's candidate rows as llm-d's endpoint picker sends them."""
    raw = candidates(n, seed)
    rows = []
    for values in raw[:, :len(RAW_COLUMNS)].tolist():
        row: dict[str, float] = {"num_tokens_generated": 0}
        for column, value in zip(RAW_COLUMNS, values):
            field = _FIELD_OF.get(column)
            if field is not None:
                row[field] = min(1.0, float(value)) if field in _FRACTIONS else int(value)
        rows.append(row)
    return rows


def bench_http(candidates_per_call: int = 100, clients: int = 4, seconds: float = 5.0, rounds: int = 3,
               workers: int = 2, apis: tuple[str, ...] = APIS, reference: Path | None = None) -> list[Row]:
    """Interleaved rounds of each API (and of llm-d's own prediction server with ``reference``, a Python with
    its requirements); one result per round and API."""
    if reference is not None:
        with tempfile.TemporaryDirectory(prefix="headroom-bench-reference-") as scratch:
            from headroom.benchmarks import llmd_reference
            from headroom.benchmarks.kube_api import build_tool
            from headroom.benchmarks.live import cpu_seconds

            source = build_tool("gie-source")
            servers, port = llmd_reference.start(reference, source, Path(scratch), llmd_rows(4000, seed=2))
            try:
                pid = servers[-1].popen.pid
                return _rounds(candidates_per_call, clients, seconds, rounds, workers, (*apis, REFERENCE),
                               (f"127.0.0.1:{port}", lambda: cpu_seconds(pid)))
            finally:
                for server in servers:
                    server.stop()
    return _rounds(candidates_per_call, clients, seconds, rounds, workers, apis, None)


def _rounds(candidates_per_call: int, clients: int, seconds: float, rounds: int, workers: int,
            apis: tuple[str, ...], reference: tuple[str, Callable[[], float]] | None) -> list[Row]:
    from headroom.contract.settings import from_env
    from headroom.predictor.runtime import ModelRuntime
    from headroom.predictor.server import PredictorServer
    from headroom.predictor.settings import PredictorSettings

    server = PredictorServer(from_env(PredictorSettings, {}, host="127.0.0.1", port=0, metrics_port=-1, http_port=0,
                                      workers=workers, http_pool_key="bench"), kafka=None,
                             runtime=ModelRuntime(trust=BENCH_TRUST))
    for raw, _ in reference_messages():
        server.runtime.apply(raw)
    server.start()
    results: list[Row] = []
    try:
        for round_ in range(rounds):
            for api in apis:
                target = f"127.0.0.1:{server.http_port}" if api == "http" else server.address
                cpu: Callable[[], float] = time.process_time
                if api == REFERENCE:
                    if reference is None:
                        raise ValueError(f"the {REFERENCE} API needs llm-d's prediction server (--reference)")
                    target, cpu = reference
                command = [sys.executable, "-m", "headroom.benchmarks.predictor_http",
                           "http" if api == REFERENCE else api, target, str(candidates_per_call), str(clients),
                           str(seconds)]
                cpu_before = cpu()
                output = subprocess.run(command, check=True, capture_output=True, text=True, timeout=seconds + 120)
                server_cpu = cpu() - cpu_before
                result = json.loads(output.stdout.strip().splitlines()[-1])
                result["server_cpu_ms_per_call"] = 1000 * server_cpu / max(1, result["calls"])
                results.append({"api": api, "round": round_, "candidates": candidates_per_call, "clients": clients,
                                "server_workers": workers, **result})
    finally:
        server.stop(grace=1.0)
    return results


def summary(results: list[Row]) -> list[Row]:
    """Per API: the median over rounds of each figure, and its server CPU per call relative to ``grpc``."""
    by_api: dict[str, list[Row]] = {}
    for row in results:
        by_api.setdefault(row["api"], []).append(row)
    figures = ("calls_per_s", "p50_ms", "p99_ms", "server_cpu_ms_per_call")
    out: list[Row] = [{"api": api, **{f: float(np.median([r[f] for r in rows])) for f in figures}}
                      for api, rows in by_api.items()]
    grpc = next((row["server_cpu_ms_per_call"] for row in out if row["api"] == "grpc"), None)
    for row in out:
        row["cpu_vs_grpc"] = row["server_cpu_ms_per_call"] / grpc if grpc else float("nan")
    return out


def load(api: str, target: str, candidates_per_call: int, clients: int, seconds: float) -> dict[str, float]:
    """Closed loop against one API from this process; ``calls`` counts the answered ones."""
    n = candidates_per_call
    call = _http_caller(target, n) if api == "http" else _grpc_caller(api, target, n)
    for _ in range(50):
        assert call(), f"{api} warm-up call failed"
    samples, failed, elapsed = closed_loop(call, clients, seconds)
    ms = np.asarray(samples) * 1000
    return {"calls": len(samples) - failed, "failed": failed, "calls_per_s": (len(samples) - failed) / elapsed,
            "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}


def _http_caller(target: str, n: int) -> Callable[[], bool]:
    import threading

    body = json.dumps({"requests": llmd_rows(n)}).encode()
    host, port = target.rsplit(":", 1)
    local = threading.local()

    def call() -> bool:
        connection = getattr(local, "connection", None)
        if connection is None:
            connection = local.connection = http.client.HTTPConnection(host, int(port), timeout=5)
        connection.request("POST", "/predict/bulk/strict", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = response.read()
        return response.status == 200 and len(answer) > n
    return call


def _grpc_caller(api: str, address: str, n: int) -> Callable[[], bool]:
    import grpc

    from headroom.predictor.proto import prediction_pb2, prediction_pb2_grpc

    rows = candidates(n, seed=1)
    if api == "grpc-raw":
        request = prediction_pb2.PredictRequest(pool_key="bench", raw=prediction_pb2.RawColumns(columns={
            name: prediction_pb2.RawColumn(values=rows[:, i]) for i, name in enumerate(RAW_COLUMNS)}))
    else:
        request = predict_request(rows)
    stub = prediction_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(address))

    def call() -> bool:
        try:
            return bool(stub.Predict(request, timeout=5).n_rows == n)
        except grpc.RpcError:
            return False
    return call


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] in APIS:
    print(json.dumps(load(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))))
