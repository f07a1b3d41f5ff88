"""A command that cannot do its job says so in one line, as real processes: with no broker at the address
(``models list``, ``worker start``), and with a router port taken — not librdkafka's retries line by line,
nor a traceback. And the filter that spaces librdkafka's lines out, on its own."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys

import pytest

from headroom.kafka_clients import librdkafka_logger
from tests.conftest import free_port
from tests.keys import write_private_key, write_public_key


def headroom(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HEADROOM_")}
    return subprocess.run([sys.executable, "-m", "headroom.cli.main", *args], env={**environ, **env},
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.e2e
@pytest.mark.parametrize("command", [("models", "list"), ("worker", "start")])
def test_no_broker_is_one_line(command, tmp_path):
    env = {"HEADROOM_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}",  # nothing listens there
           "HEADROOM_MODEL_TRUSTED_KEYS": str(write_public_key(tmp_path / "keys")),
           "HEADROOM_MODEL_SIGNING_KEY_FILE": str(write_private_key(tmp_path)),
           "HEADROOM_PIPELINE_DATA_DIR": str(tmp_path / "pipeline")}
    done = headroom(*command, env=env)
    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"headroom {command[0]}: cannot ") and "no broker answered" in line
    assert "HEADROOM_KAFKA_BOOTSTRAP" in line


@pytest.mark.parametrize("taken", ["httpPort", "pickPort", "extProcPort"])
def test_a_taken_router_port_is_one_line(taken, tmp_path):
    ports = {"httpPort": free_port(), "pickPort": free_port(), "extProcPort": free_port()}
    (tmp_path / "router.yaml").write_text(
        "settings: {" + ", ".join(f"{k}: {v}" for k, v in ports.items()) + ", predictor: none, telemetry: false}\n"
        'servers: [{id: a, address: "127.0.0.1:1"}]\n')
    with socket.create_server(("127.0.0.1", ports[taken])):
        done = headroom("router", "serve", "--config", str(tmp_path / "router.yaml"), env={})
    assert done.returncode == 1
    setting = {"httpPort": "HEADROOM_ROUTER_HTTP_PORT", "pickPort": "HEADROOM_ROUTER_PICK_PORT",
               "extProcPort": "HEADROOM_ROUTER_EXT_PROC_PORT"}[taken]
    [line] = done.stderr.splitlines()
    assert line.startswith(f"headroom router: cannot listen on 127.0.0.1:{ports[taken]} ({setting}): ")
    assert "in use" in line


def test_librdkafka_lines_are_sorted_and_spaced_out(caplog):
    logger = librdkafka_logger("tests.notes")
    refused = "[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused"
    clock = iter([0.0, 0.1, 0.2, 30.0, 61.0, 62.0, 62.5]).__next__
    [notes] = logger.filters
    notes._clock = clock
    with caplog.at_level(logging.INFO, logger="tests.notes.librdkafka"):
        for fac, message in [("FAIL", refused)] * 5 + [("FAIL", "SASL authentication error: bad password"),
                                                       ("GROUP", "Coordinator load in progress")]:
            logger.error("%s [%s] %s", fac, "rdkafka#consumer-1", message)
    shown = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "tests.notes.librdkafka"]
    assert shown == [  # unreachable: once at info, then a minute later as an error with how often it came
        ("INFO", f"FAIL [rdkafka#consumer-1] {refused}"),
        ("ERROR", f"FAIL [rdkafka#consumer-1] {refused} (3 more like it in 61 s)"),
        ("ERROR", "FAIL [rdkafka#consumer-1] SASL authentication error: bad password")]  # another kind: at once
