"""`headroom demo` in a short form, as real processes: the system learns, routes with its models, detects the
regime change, loses no telemetry, and leaves nothing running."""

import json
import os
import random
import subprocess
import sys

import pytest

from headroom.contract.settings import from_env
from headroom.localkafka import broker
from headroom.localkafka.settings import BrokerSettings
from tests.conftest import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]


def test_short_demo_learns_routes_and_detects_drift(tmp_path):
    kafka_port, controller_port = free_port(), free_port()
    env = {**os.environ, "HEADROOM_KAFKA_PORT": str(kafka_port), "HEADROOM_KAFKA_CONTROLLER_PORT": str(controller_port),
           "HEADROOM_DEMO_STATE_DIR": str(tmp_path / "state"), "HEADROOM_DEMO_BASE_PORT": str(random.randrange(21000, 29000, 20))}
    done = subprocess.run([sys.executable, "-m", "headroom.cli.main", "demo", "--duration", "60", "--report-dir",
                           str(tmp_path / "report")], env=env, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    report = json.loads((tmp_path / "report" / "demo.json").read_text())

    assert report["promotions"] >= 1
    assert report["model_versions"], "the router used no model version"
    assert report["fallback_share_after_warmup"] < 0.2
    assert sum(report["drift_events"].values()) > report["drift_events_before_change"]
    assert report["summary"]["completed"] > 300
    assert report["summary"]["failed"] == 0
    assert report["telemetry_in_kafka"] == report["summary"]["completed"]
    assert report["processes_left"] == []
    settings = from_env(BrokerSettings, port=kafka_port, controller_port=controller_port, state_dir=tmp_path / "state")
    assert not broker.status(settings).running
