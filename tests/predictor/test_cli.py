import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headroom.contract.model_update import model_key
from headroom.predictor.server import SERVICE_NAME
from tests.conftest import free_port
from tests.predictor.models import message, train
from tests.predictor.test_kafka_e2e import publish

HEADROOM = str(Path(sys.executable).with_name("headroom"))


@pytest.mark.kafka
def test_serve_becomes_healthy_and_stops_gracefully_on_sigterm(kafka, fresh_topic, trusted_keys):
    topic = fresh_topic("model-updates", config={"cleanup.policy": "compact"})
    publish(dataclasses.replace(kafka, model_topic=topic), topic,
            (model_key("pool-a", "ttft", "mean"), message(train(seed=1), 1)))
    port = free_port()
    env = {**os.environ, "HEADROOM_KAFKA_BOOTSTRAP": kafka.bootstrap_servers, "HEADROOM_TOPIC_MODELS": topic,
           "HEADROOM_PREDICTOR_HOST": "127.0.0.1", "HEADROOM_PREDICTOR_PORT": str(port),
           "HEADROOM_PREDICTOR_METRICS_PORT": "0", "HEADROOM_PREDICTOR_GRACE_SECONDS": "1",
           "HEADROOM_MODEL_TRUSTED_KEYS": trusted_keys}
    process = subprocess.Popen([HEADROOM, "predictor", "serve"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        status = None
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            check = health_pb2_grpc.HealthStub(channel).Check
            deadline = time.monotonic() + 60
            while status != health_pb2.HealthCheckResponse.SERVING and time.monotonic() < deadline \
                    and process.poll() is None:
                try:
                    status = check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=1).status
                except grpc.RpcError:
                    time.sleep(0.2)
        assert status == health_pb2.HealthCheckResponse.SERVING
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
    assert process.returncode == 0, output
    assert "stopping gracefully" in output and "stopped" in output


@pytest.mark.parametrize("env, message", [
    pytest.param({"HEADROOM_PREDICTOR_PORT": "not-a-port"}, "HEADROOM_PREDICTOR_PORT='not-a-port'", id="port"),
    pytest.param({}, "no trusted model-signing keys: set HEADROOM_MODEL_TRUSTED_KEYS", id="no-trusted-keys"),
    pytest.param({"HEADROOM_TLS_CLIENT_CA_FILE": "ca.pem"}, "HEADROOM_TLS_CLIENT_CA_FILE needs HEADROOM_TLS_CERT_FILE",
                 id="mtls-without-tls"),
])
def test_serve_reports_a_bad_setting_without_a_traceback(env, message):
    assert_refused_at_start(env, message)


def test_serve_refuses_a_trusted_keys_directory_with_no_key_in_it(tmp_path):
    (tmp_path / ".hidden.pub").write_text("a dotfile is not a key")  # as a mounted Secret's ..data entries
    (tmp_path / "keys").mkdir()  # nor is a directory
    assert_refused_at_start({"HEADROOM_MODEL_TRUSTED_KEYS": str(tmp_path)},
                            f"HEADROOM_MODEL_TRUSTED_KEYS={tmp_path}: the directory holds no key file")


def assert_refused_at_start(env, message):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HEADROOM_MODEL_")}, **env}
    result = subprocess.run([HEADROOM, "predictor", "serve"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr
