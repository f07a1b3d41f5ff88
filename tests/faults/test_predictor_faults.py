"""A prediction server exposes only what it says, serves bounded work, and restarts quickly: ``headroom predictor
serve`` as a real process, and worker processes, on the real broker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import grpc
import numpy as np
import pytest

from headroom.contract.features import FEATURE_NAMES
from headroom.contract.model_update import model_key
from headroom.contract.settings import from_env
from headroom.contract.telemetry import encode
from headroom.predictor.proto import prediction_pb2, prediction_pb2_grpc
from headroom.predictor.server import PredictorServer
from headroom.predictor.settings import PredictorSettings
from tests.conftest import free_port
from tests.predictor.models import message, train
from tests.predictor.test_kafka_e2e import publish
from tests.streams.test_pipeline_kafka import send
from tests.streams.worker_process import WorkerProcess
from tests.trainer.synthetic import synthetic_records

pytestmark = [pytest.mark.kafka, pytest.mark.e2e, pytest.mark.timeout(300)]

LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}  # 127.0.0.1, as
# an IPv4-mapped IPv6 address, ::1
HEADROOM = [sys.executable, "-c", "import sys; from headroom.cli.main import main; sys.exit(main())"]


def listening_addresses(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp writes them) of the sockets listening on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def rows_request(n: int) -> prediction_pb2.PredictRequest:
    return prediction_pb2.PredictRequest(pool_key="pool-a", n_features=len(FEATURE_NAMES),
                                         features_f32le=np.zeros((n, len(FEATURE_NAMES)), "<f4").tobytes())


def test_the_predictor_binds_loopback_by_default_says_so_and_refuses_oversized_calls(pipeline_kafka, tmp_path,
                                                                                     trusted_keys):
    publish(pipeline_kafka, pipeline_kafka.model_topic, (model_key("pool-a", "ttft", "mean"), message(train(), 1)))
    port = free_port()
    env = {**os.environ, "HEADROOM_KAFKA_BOOTSTRAP": pipeline_kafka.bootstrap_servers,
           "HEADROOM_TOPIC_MODELS": pipeline_kafka.model_topic, "HEADROOM_PREDICTOR_METRICS_PORT": "-1",
           "HEADROOM_MODEL_TRUSTED_KEYS": trusted_keys}
    env.pop("HEADROOM_PREDICTOR_HOST", None)
    log_path = tmp_path / "predictor.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen([*HEADROOM, "predictor", "serve", "--port", str(port)], env=env, stdout=log,
                                   stderr=subprocess.STDOUT)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = prediction_pb2_grpc.PredictionServiceStub(channel)
            deadline = time.monotonic() + 120
            while True:
                assert process.poll() is None, log_path.read_text()
                try:
                    stub.Predict(rows_request(3), timeout=2)
                    break
                except grpc.RpcError:
                    assert time.monotonic() < deadline, log_path.read_text()
                    time.sleep(0.5)
            bound = listening_addresses(port)
            with pytest.raises(grpc.RpcError) as huge:
                stub.Predict(rows_request(4_000_000), timeout=30)
            with pytest.raises(grpc.RpcError) as long:
                stub.Predict(rows_request(16_385), timeout=30)
            answer = stub.Predict(rows_request(16_384), timeout=30)
    finally:
        process.terminate()
        process.wait(20)
    assert bound and bound <= LOOPBACK, bound  # not 0.0.0.0 (00000000) or :: (all zeros)
    log = log_path.read_text()
    assert f"predictor serving gRPC on 127.0.0.1:{port}" in log
    assert huge.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # refused by size before any work
    assert long.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "HEADROOM_PREDICTOR_MAX_ROWS" in long.value.details()
    assert answer.n_rows == 16_384


def test_a_restarted_predictor_verifies_only_the_newest_version_of_each_model(pipeline_kafka, trusted_keys):
    boosters = {target: train(target, trees=5) for target in ("ttft", "tpot", "e2e")}
    publish(pipeline_kafka, pipeline_kafka.model_topic, *[
        (model_key("pool-a", target, "mean"), message(booster, version, target=target))
        for version in range(1, 31) for target, booster in boosters.items()])
    settings = from_env(PredictorSettings, {"HEADROOM_MODEL_TRUSTED_KEYS": trusted_keys}, host="127.0.0.1", port=0,
                        metrics_port=-1)
    for _ in range(2):  # a first start, then a restart on the same topic
        server = PredictorServer(settings, pipeline_kafka).start()
        try:
            assert server.tailer.wait_ready(60)
            assert server.tailer.consumed == 90
            assert server.runtime.applied == 3 and server.runtime.stale == 87
            assert {m.version for m in server.runtime.live()} == {30}
        finally:
            server.stop(0)


def test_a_worker_killed_and_restarted_takes_its_partitions_back_without_waiting_for_its_old_session(
        pipeline_kafka, tmp_path):
    session_s = 90.0  # the old member is given up after this long; a static member need not wait for it
    app_id = f"static-{uuid.uuid4().hex[:8]}"
    env = {"HEADROOM_PIPELINE_INSTANCE_ID": "worker-0", "HEADROOM_PIPELINE_SESSION_TIMEOUT": str(session_s),
           "HEADROOM_RETRAIN_MIN_SAMPLES": str(10**9)}
    first = WorkerProcess(pipeline_kafka, app_id, tmp_path, extra_env=env).start()
    try:
        send(pipeline_kafka, [{"key": b"pool-a", "value": payload} for payload in fresh_payloads(100, seed=1)])
        first.wait_for(lambda m: m.get("headroom_telemetry_ingested_total", 0) >= 100, 120, "the first records")
    finally:
        first.kill()
    restarted_at = time.monotonic()
    second = WorkerProcess(pipeline_kafka, app_id, tmp_path, extra_env=env).start()
    try:
        send(pipeline_kafka, [{"key": b"pool-a", "value": payload} for payload in fresh_payloads(50, seed=2)])
        second.wait_for(lambda m: m.get("headroom_telemetry_ingested_total", 0) >= 50, session_s * 0.55,
                        "the next records, long before the old member's session could expire")
        assert time.monotonic() - restarted_at < session_s
    finally:
        second.stop()


def fresh_payloads(count: int, seed: int) -> list[bytes]:
    return [encode(r) for r in synthetic_records(count, seed=seed, start_ts=time.time(), rate_per_s=200.0)]
