"""llm-d's sidecars as the reference's Helm chart starts them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headroom.contract.model_update import decode_update
from headroom.llmd.sidecar import plan
from headroom.model_files import write_model_file
from tests.conftest import free_port
from tests.keys import TRUST
from tests.llmd.http import call
from tests.predictor.models import message, train

SHIM = Path(__file__).resolve().parents[2] / "infra" / "image" / "uvicorn"


@pytest.mark.parametrize(("argv", "environ", "role", "expected"), [
    (["prediction_server:app", "--host", "0.0.0.0", "--port", "8003"], {"SERVER_TYPE": "prediction-3"},
     "prediction", {"http_port": 8003, "host": "0.0.0.0", "port": 0, "metrics_port": -1, "http_objective": "quantile"}),
    (["--", "prediction_server:app", "--port", "8001", "--workers", "28"], {"LATENCY_OBJECTIVE_TYPE": "mean"},
     "prediction", {"http_port": 8001, "http_objective": "mean"}),
    ([], {"SERVER_TYPE": "prediction-1", "PREDICT_PORT": "8002", "HEADROOM_PREDICTOR_PORT": "50061",
          "HEADROOM_PREDICTOR_HTTP_OBJECTIVE": "quantile", "LATENCY_OBJECTIVE_TYPE": "mean"},
     "prediction", {"http_port": 8002, "port": 50061, "http_objective": "quantile"}),
    (["--"], {"SERVER_TYPE": "training", "LATENCY_OBJECTIVE_TYPE": "mean"}, "training",
     {"port": 8000, "objective": "mean"}),
    (["training_server:app", "--port", "8010"], {}, "training", {"port": 8010}),
], ids=["chart-prediction", "reference-objective", "headroom-settings-win", "chart-training", "named-training"])
def test_a_sidecar_serves_what_the_chart_asks_for(argv, environ, role, expected):
    got_role, settings = plan(argv, environ)
    assert got_role == role
    assert {name: getattr(settings, name) for name in expected} == expected


@pytest.mark.e2e
def test_the_images_uvicorn_serves_llm_d_prediction_api_from_model_files(tmp_path, trusted_keys):
    for target in ("ttft", "tpot"):
        raw = message(train(target, objective="quantile", trees=5), 1, pool_key="default", target=target,
                      objective="quantile")
        write_model_file(tmp_path, decode_update(raw, TRUST), raw)
    port = free_port()
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "SERVER_TYPE": "prediction-1", "HEADROOM_PREDICTOR_MODELS": str(tmp_path),
           "HEADROOM_MODEL_TRUSTED_KEYS": trusted_keys}
    log = tmp_path / "sidecar.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([str(SHIM), "prediction_server:app", "--host", "127.0.0.1", "--port", str(port)],
                                   env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if call(f"http://127.0.0.1:{port}", "/readyz", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            assert process.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "the sidecar did not become ready"
            time.sleep(0.2)
        row = {"kv_cache_percentage": 0.3, "input_token_length": 100, "num_request_waiting": 0,
               "num_request_running": 1, "num_tokens_generated": 0, "prefix_cache_score": 0.0}
        status, body = call(f"http://127.0.0.1:{port}", "/predict/bulk/strict", {"requests": [row, row]})
        assert status == 200 and len(body["predictions"]) == 2
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
