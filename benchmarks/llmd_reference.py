"""llm-d's own latency predictor, to measure headroom's HTTP API against (``headroom bench predictor http
--reference PYTHON``): the training and prediction servers of the Inference Extension's module (v1.5.0,
``latencypredictor/``, from ``infra/build-tool gie-source``), run with a Python that has their
``requirements.txt``, each as one uvicorn process on loopback.

The training server is given the benchmark's rows as samples, with latencies from a fixed law, and trains its
default model (XGBoost, quantile); the prediction server downloads it, as it does in the reference's Pod.
:func:`start` returns once the prediction server answers from a model of the reference's size (its 200
trees), not the one-sample model it starts with.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headroom.benchmarks.live import Process
from headroom.ports import free_port

MIN_TREES = 100  # a trained model's: the one the training server starts with has a handful


@dataclass
class Server(Process):
    log: Path = Path()


Row = dict[str, Any]  # a JSON object of the reference's API


def samples(rows: list[Row]) -> list[Row]:
    """Training samples for ``rows``: TTFT and TPOT from a fixed law of the row's state."""
    return [{**row, "actual_ttft_ms": 20 + 0.05 * row["input_token_length"] * (1 - row["prefix_cache_score"])
             + 15 * row["num_request_waiting"] + 200 * row["kv_cache_percentage"],
             "actual_tpot_ms": 8 + 0.3 * row["num_request_running"] + 10 * row["kv_cache_percentage"],
             "num_tokens_generated": 1 + i % 200} for i, row in enumerate(rows)]


def start(python: Path, source: Path, folder: Path, rows: list[Row]) -> tuple[list[Server], int]:
    """The reference's two servers, trained on ``rows``; returns them (prediction server last) and its port."""
    code = source / "latencypredictor"
    training_port, prediction_port = free_port(), free_port()
    models = {f"LATENCY_{t}_{kind}_PATH": str(folder / "training" / f"{t.lower()}{suffix}.joblib")
              for t in ("TTFT", "TPOT") for kind, suffix in (("MODEL", ""), ("SCALER", "_scaler"))}
    common = {"LATENCY_MODEL_TYPE": "xgboost", "LATENCY_OBJECTIVE_TYPE": "quantile", "OMP_NUM_THREADS": "1"}
    training = _uvicorn(python, code, "training_server", training_port, folder / "training.log", {
        **common, **models, "LATENCY_RETRAINING_INTERVAL_SEC": "5", "LATENCY_MIN_SAMPLES_FOR_RETRAIN": "100"})
    processes = [training]
    base = f"http://127.0.0.1:{training_port}"
    try:
        _wait(lambda: _get(f"{base}/healthz") is not None, training, "the training server")
        entries = samples(rows)
        for start_at in range(0, len(entries), 1000):
            _post(f"{base}/add_training_data_bulk", {"entries": entries[start_at:start_at + 1000]})
        _wait(lambda: len(_get(f"{base}/model/ttft/xgb/json") or []) >= MIN_TREES
              and len(_get(f"{base}/model/tpot/xgb/json") or []) >= MIN_TREES, training, "a trained model", 600)
        local = {f"LOCAL_{t}_{kind}_PATH": str(folder / "prediction" / f"{t.lower()}{suffix}.joblib")
                 for t in ("TTFT", "TPOT") for kind, suffix in (("MODEL", ""), ("SCALER", "_scaler"), ("GATED_MODEL",
                                                                                                      "_gated"))}
        prediction = _uvicorn(python, code, "prediction_server", prediction_port, folder / "prediction.log", {
            **common, **local, "TRAINING_SERVER_URL": base, "PREDICT_PORT": str(prediction_port)})
        processes.append(prediction)
        _wait(lambda: (_get(f"http://127.0.0.1:{prediction_port}/readyz") or {}).get("status") == "ready",
              prediction, "the prediction server")
    except BaseException:
        for process in processes:
            process.stop()
        raise
    return processes, prediction_port


def _uvicorn(python: Path, code: Path, app: str, port: int, log: Path, env: dict[str, str]) -> Server:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        popen = subprocess.Popen([str(python), "-m", "uvicorn", f"{app}:app", "--host", "127.0.0.1", "--port",
                                  str(port)], cwd=code, env={**os.environ, **env}, stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return Server(app, popen, log)


def _wait(ready: Callable[[], bool], process: Server, what: str, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if process.popen.poll() is not None or time.monotonic() > deadline:
            log = process.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the reference's {process.name}: no {what} (exit {process.popen.poll()}):\n{log}")
        time.sleep(1.0)


def _get(url: str) -> Any:
    """The JSON document at ``url``, or None when it does not answer with one."""
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return json.loads(answer.read())
    except (OSError, ValueError):
        return None


def _post(url: str, body: Row) -> None:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        if answer.status != 202:
            raise RuntimeError(f"{url}: HTTP {answer.status}")
