"""`headroom kafka up / status / down` against a broker of their own."""

import os
import socket
import subprocess
import sys

import pytest

from headroom.contract.settings import from_env
from headroom.localkafka import broker
from headroom.localkafka.errors import PortTaken
from headroom.localkafka.settings import BrokerSettings
from tests.conftest import free_port

pytestmark = pytest.mark.kafka


def headroom(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headroom.cli.main", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=180)


def test_up_twice_status_down(tmp_path):
    env = {"HEADROOM_KAFKA_PORT": str(free_port()), "HEADROOM_KAFKA_CONTROLLER_PORT": str(free_port()),
           "HEADROOM_STATE_DIR": str(tmp_path)}
    try:
        first = headroom("kafka", "up", env=env)
        assert first.returncode == 0, first.stderr
        assert "created topics: telemetry, telemetry-dlq, model-updates" in first.stdout
        again = headroom("kafka", "up", env=env)
        assert again.returncode == 0 and "created topics" not in again.stdout
        status = headroom("kafka", "status", env=env)
        assert status.returncode == 0 and "answering" in status.stdout
        check = headroom("kafka", "check", "--records", "500", env=env)
        assert check.returncode == 0, check.stderr
        assert "consumed 500" in check.stdout and "duplicates 0" in check.stdout
    finally:
        down = headroom("kafka", "down", env=env)
    assert down.returncode == 0 and "Kafka stopped" in down.stdout
    stopped = headroom("kafka", "status", env=env)
    assert stopped.returncode == 3 and "not running" in stopped.stdout


def test_stale_pid_file_is_ignored(tmp_path):
    settings = from_env(BrokerSettings, {}, state_dir=tmp_path)
    settings.home.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (settings.home / "broker.pid").write_text(str(dead.pid))
    assert broker.status(settings).running is False
    assert not (settings.home / "broker.pid").exists()


def test_taken_port_is_a_clear_error(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        settings = from_env(BrokerSettings, {}, state_dir=tmp_path, port=port, controller_port=free_port())
        with pytest.raises(PortTaken, match=f"port {port} on 127.0.0.1 is taken"):
            broker.up(settings)
