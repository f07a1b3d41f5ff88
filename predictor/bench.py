"""Benchmarks of the predictor: in-process runtime latency, and one gRPC instance under closed-loop load
from a separate load-generator process: ``python -m predictor.bench load ...``, or the compiled one in
``benchmarks/grpc_load`` (Go; it costs the shared cores about a third of the CPU per call of the Python one).

Models are trained here with the reference hyperparameters (200 trees, depth 6) on synthetic candidate
rows: TTFT and TPOT, each a mean and a p90 model.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from headroom.contract.features import FEATURE_NAMES, FEATURE_SCHEMA, feature_matrix
from headroom.contract.model_update import encode_update, make_update

REFERENCE_PARAMS = {"max_depth": 6, "eta": 0.05, "subsample": 0.8, "colsample_bytree": 0.8, "min_child_weight": 5,
                    "gamma": 0.2, "alpha": 0.01, "lambda": 0.1, "tree_method": "hist", "nthread": 1}
MODELS = (("ttft", "mean"), ("tpot", "mean"), ("ttft", "quantile"), ("tpot", "quantile"))


EFFECTIVE_PROMPT = FEATURE_NAMES.index("effective_prompt_tokens")


def candidates(n: int, seed: int = 0) -> np.ndarray:
    """Feature rows of ``n`` plausible candidate servers (synthetic, for benchmarks and tests)."""
    rng = np.random.default_rng(seed)
    inflight_tokens = rng.integers(0, 200_000, n)
    return feature_matrix({
        "kv_cache_usage": rng.uniform(0, 1, n), "num_waiting": rng.integers(0, 20, n),
        "num_running": rng.integers(0, 64, n), "prompt_tokens": rng.integers(1, 8000, n),
        "prefix_match": rng.uniform(0, 1, n), "inflight_requests": rng.integers(0, 80, n),
        "inflight_prompt_tokens": inflight_tokens, "max_tokens": rng.integers(1, 2048, n),
        "inflight_prefill_tokens": (inflight_tokens * rng.uniform(0, 1, n)).astype(np.int64),
        "last_token_age_ms": rng.exponential(20, n), "token_interval_ms": rng.uniform(5, 60, n)})


def reference_messages(trees: int = 200, rows: int = 20_000, seed: int = 0) -> list[tuple[bytes, object]]:
    """Model-update messages (and their boosters) for the four benchmark models."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import xgboost

    x = candidates(rows, seed)
    rng = np.random.default_rng(seed + 1)
    load = 1 + 3 * x[:, 0] + 0.2 * x[:, 1] + 0.02 * x[:, 2]
    targets = {"ttft": 20 * load + 0.01 * x[:, EFFECTIVE_PROMPT] + rng.exponential(5, rows),
               "tpot": 8 * load + rng.exponential(2, rows)}
    out = []
    for target, objective in MODELS:
        params = dict(REFERENCE_PARAMS, seed=seed)
        if objective == "quantile":
            params.update(objective="reg:quantileerror", quantile_alpha=0.9)
        booster = xgboost.train(params, xgboost.DMatrix(x, label=targets[target]), trees)
        update = make_update(model=bytes(booster.save_raw("ubj")), version=1, pool_key="bench", target=target,
                             objective=objective, quantile=0.9 if objective == "quantile" else None,
                             feature_schema=FEATURE_SCHEMA, model_format="ubj", created_at=time.time())
        out.append((encode_update(update), booster))
    return out


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)),
            "p99_ms": float(np.percentile(ms, 99)),
            "mean_ms": float(ms.mean())}


def bench_runtime(candidate_counts=(1, 10, 100, 1000), iterations: int = 2000, models: int = 4,
                  threads: int = 1) -> list[dict]:
    """In-process: one ``ModelRuntime.predict`` of all models, and XGBoost ``inplace_predict`` per model."""
    from headroom.predictor.kernels import available_engines
    from headroom.predictor.runtime import ModelRuntime

    messages = reference_messages()[:models]
    results = []
    for engine in available_engines():
        runtime = ModelRuntime(engine=engine, threads=threads)
        for raw, _ in messages:
            runtime.apply(raw)
        for n in candidate_counts:
            rows = candidates(n, seed=n)
            runs = iterations if engine == "numba" else max(20, iterations // 50)
            results.append({"engine": engine, "models": models, "candidates": n, "threads": threads,
                            **percentiles(_time(lambda: runtime.predict("bench", rows), runs))})
    for n in candidate_counts:
        rows = candidates(n, seed=n)
        boosters = [b for _, b in messages]
        results.append({"engine": "xgboost inplace_predict", "models": models, "candidates": n,
                        **percentiles(_time(lambda: [b.inplace_predict(rows) for b in boosters],
                                            max(50, iterations // 10)))})
    return results


def _time(work, runs: int) -> list[float]:
    for _ in range(min(50, runs)):
        work()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        samples.append(time.perf_counter() - started)
    return samples


GO_LOAD_SOURCE = Path(__file__).resolve().parents[1] / "benchmarks" / "grpc_load"
LOAD_GENERATORS = ("python", "coalescing", "go")


def bench_grpc(candidate_counts=(100, 1000), clients: int = 4, seconds: float = 10.0, workers: int = 2,
               models: int = 4, load_generator: str = "python", threads: int = 1) -> list[dict]:
    """One in-process server; a separate process drives it closed-loop with ``clients`` concurrent callers:
    Python threads calling the stub (``python``) or :class:`~predictor.client.PredictorClient`
    (``coalescing``), or the compiled generator's goroutines (``go``)."""
    from headroom.contract.settings import from_env
    from headroom.predictor.server import PredictorServer
    from headroom.predictor.settings import PredictorSettings

    if load_generator not in LOAD_GENERATORS:
        raise ValueError(f"load generator {load_generator!r}: expected one of {LOAD_GENERATORS}")
    server = PredictorServer(from_env(PredictorSettings, {}, host="127.0.0.1", port=0, metrics_port=-1,
                                      workers=workers, threads=threads), kafka=None)
    for raw, _ in reference_messages()[:models]:
        server.runtime.apply(raw)
    with tempfile.TemporaryDirectory(prefix="headroom-grpc-load-") as scratch:
        go_binary = build_go_load(Path(scratch)) if load_generator == "go" else None
        server.start()
        results = []
        served_before = 0.0
        try:
            for n in candidate_counts:
                if go_binary is None:
                    command = [sys.executable, "-m", "headroom.predictor.bench",
                               "load-coalesced" if load_generator == "coalescing" else "load",
                               server.address, str(n), str(clients), str(seconds)]
                else:
                    request = Path(scratch) / f"request-{n}.bin"
                    request.write_bytes(predict_request(candidates(n, seed=1)).SerializeToString())
                    command = [str(go_binary), "-addr", server.address, "-method", PREDICT_METHOD,
                               "-request", str(request), "-clients", str(clients), "-seconds", str(seconds)]
                cpu_before, children_before = time.process_time(), _children_cpu()
                output = subprocess.run(command, check=True, capture_output=True, text=True, timeout=seconds + 120)
                server_cpu = time.process_time() - cpu_before
                result = json.loads(output.stdout.strip().splitlines()[-1])
                served = server.metrics.requests.labels("OK")._value.get()
                result["server_cpu_ms_per_rpc"] = 1000 * server_cpu / max(1.0, served - served_before)
                if go_binary is not None:
                    result["client_cpu_ms_per_request"] = 1000 * (_children_cpu() - children_before) / result["calls"]
                served_before = served
                results.append({"candidates": n, "clients": clients, "server_workers": workers, "threads": threads,
                                "models": models, "load_generator": load_generator, **result})
        finally:
            server.stop(grace=1.0)
    return results


PREDICT_METHOD = "/headroom.predictor.v1.PredictionService/Predict"


def predict_request(rows: np.ndarray):
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


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def bench_update(kafka, versions: int = 10) -> dict:
    """Publish→serving delay: a fresh compacted topic, one instance tailing it, ``versions`` new TTFT versions
    published one after another (reference-size models), each timed until ``predict`` uses it."""
    import dataclasses
    import uuid

    from confluent_kafka import Producer

    from headroom.contract.model_update import decode_update, encode_update
    from headroom.contract.settings import from_env
    from headroom.contract.topics import MODEL_MESSAGE_MAX_BYTES, TopicSpec
    from headroom.localkafka.admin import ensure_topics
    from headroom.predictor.server import PredictorServer
    from headroom.predictor.settings import PredictorSettings

    topic = f"bench-model-updates-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, [TopicSpec(topic, 1, {"cleanup.policy": "compact"})])
    kafka = dataclasses.replace(kafka, model_topic=topic)
    template = decode_update(reference_messages()[0][0])
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "message.max.bytes": MODEL_MESSAGE_MAX_BYTES})
    server = PredictorServer(from_env(PredictorSettings, {}, host="127.0.0.1", port=0, metrics_port=-1), kafka)
    server.start()
    delays = []
    try:
        for version in range(1, versions + 1):
            raw = encode_update(dataclasses.replace(template, version=version, created_at=time.time()))
            started = time.perf_counter()
            producer.produce(topic, key=template.key.encode(), value=raw)
            producer.flush(10)
            for _ in range(30_000):
                if server.runtime.version(template.pool_key, template.target, template.objective) == version:
                    break
                time.sleep(0.001)
            delays.append(time.perf_counter() - started)
    finally:
        server.stop(grace=1.0)
    return {"versions": versions, "model_bytes": len(template.model), **percentiles(delays),
            "max_ms": 1000 * max(delays)}


def load_coalesced(address: str, candidates_per_call: int, clients: int, seconds: float,
                   window_seconds: float = 0.0005) -> dict:
    """Closed loop through :class:`PredictorClient`: concurrent calls are merged into fewer RPCs."""
    from headroom.predictor.client import PredictorClient

    rows = candidates(candidates_per_call, seed=1)
    with PredictorClient([address], window_seconds=window_seconds, timeout_seconds=5.0) as client:
        for _ in range(50):
            client.predict("bench", rows)
        rpcs_before, calls_before = client.rpcs, client.calls
        samples, failed, elapsed = closed_loop(lambda: bool(client.predict("bench", rows).ok.all()), clients, seconds)
        rpcs, calls = client.rpcs - rpcs_before, client.calls - calls_before
    return {"calls_per_s": len(samples) / elapsed, "candidates_per_s": len(samples) * candidates_per_call / elapsed,
            "rpcs_per_s": rpcs / elapsed, "calls_per_rpc": calls / max(1, rpcs), "failed_calls": failed,
            "window_ms": window_seconds * 1000, **percentiles(samples)}


def load(address: str, candidates_per_call: int, clients: int, seconds: float) -> dict:
    """Closed loop: each of ``clients`` threads sends its next call when the previous answer arrives."""
    import grpc

    from headroom.predictor.proto import prediction_pb2_grpc

    request = predict_request(candidates(candidates_per_call, seed=1))
    channel = grpc.insecure_channel(address)
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


def closed_loop(call, clients: int, seconds: float) -> tuple[list[float], int, float]:
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


if __name__ == "__main__" and len(sys.argv) == 6 and sys.argv[1] in ("load", "load-coalesced"):
    generate = load if sys.argv[1] == "load" else load_coalesced
    print(json.dumps(generate(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))))
