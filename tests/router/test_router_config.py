import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headroom.router.app.config import load_config
from headroom.router.errors import ConfigError

HEADROOM = str(Path(sys.executable).parent / "headroom")
EXAMPLE = Path(__file__).resolve().parents[2] / "router" / "router.example.yaml"


def test_example_config_loads():
    config = load_config(EXAMPLE, environ={})
    assert [s.server_id for s in config.servers] == ["sim-0", "sim-1"]
    assert config.settings.http_port == 8080 and config.settings.predictor == "embedded"
    assert config.pipeline.predicted.producer.params.slo_buffer_factor == 1.0


def test_environment_then_file_settings():
    config = load_config({"settings": {"httpPort": 81}}, environ={"HEADROOM_ROUTER_HTTP_PORT": "80",
                                                                  "HEADROOM_ROUTER_SEED": "7"})
    assert (config.settings.http_port, config.settings.seed) == (81, 7)


def test_a_server_may_name_its_pod():
    config = load_config({"servers": [{"id": "a", "address": "10.0.0.1:8000", "namespace": "llm", "pod": "vllm-0"},
                                      {"address": "10.0.0.2:8000"}]}, environ={})
    assert [(s.namespace, s.pod) for s in config.servers] == [("llm", "vllm-0"), ("", "")]


def test_servers_file_is_relative_to_the_config(tmp_path):
    (tmp_path / "router.yaml").write_text("serversFile: pool.yaml\n")
    assert load_config(tmp_path / "router.yaml", environ={}).servers_file == tmp_path / "pool.yaml"


@pytest.mark.parametrize("data, message", [
    pytest.param({"setings": {}}, "unknown key 'setings'", id="unknown-top-key"),
    pytest.param({"settings": {"httpPrt": 1}}, "settings: unknown key 'httpPrt'", id="unknown-setting"),
    pytest.param({"settings": {"httpPort": "80"}}, "'httpPort' must be an integer, got '80'", id="wrong-type"),
    pytest.param({"settings": {"predictor": "magic"}}, "'predictor' must be", id="bad-predictor"),
    pytest.param({"servers": [], "serversFile": "x"}, "not servers and serversFile", id="two-server-sources"),
    pytest.param({"servers": [], "pods": {}}, "not servers and pods", id="servers-and-pods"),
    pytest.param({"pods": {"namespace": "llm"}}, "pods: selector must map", id="pods-without-selector"),
    pytest.param({"pods": {"selector": {"app": "x"}}}, "pods: namespace must be", id="pods-without-namespace"),
    pytest.param({"pods": {"namespace": "llm", "selector": {"app": "x"}, "port": "80"}}, "pods: port must be",
                 id="pods-port-not-a-number"),
    pytest.param({"pods": {"namespace": "llm", "selector": {"app": "x"}, "labels": {}}}, "pods: unknown key 'labels'",
                 id="pods-unknown-key"),
    pytest.param({"scheduling": {"plugins": []}}, "ref 'producer' names no plugin", id="bad-scheduling"),
    pytest.param({"servers": [{"address": "h:1", "pod": 3}]}, "pod must be a string", id="bad-pod"),
])
def test_config_errors(data, message):
    with pytest.raises(ConfigError, match=message):
        load_config(data, environ={})


@pytest.mark.parametrize("key, env, value", [
    ("maxHeadBytes", "HEADROOM_ROUTER_MAX_HEAD_BYTES", 0), ("maxHeaders", "HEADROOM_ROUTER_MAX_HEADERS", 0),
    ("requestArrivalS", "HEADROOM_ROUTER_REQUEST_ARRIVAL_S", 0.0),
    ("keepAliveS", "HEADROOM_ROUTER_KEEP_ALIVE_S", -5.0),
    ("upstreamPoolIdleS", "HEADROOM_ROUTER_UPSTREAM_POOL_IDLE_S", -1.0),
    ("keepAliveS", "HEADROOM_ROUTER_KEEP_ALIVE_S", float("nan")),
])
def test_limits_of_zero_or_less_are_refused_naming_the_setting_from_the_file_or_the_environment(key, env, value):
    with pytest.raises(ConfigError, match=f"'{key}' \\({env}\\) must be over 0, got {value}"):
        load_config({"settings": {key: value}}, environ={})
    with pytest.raises(ConfigError, match=f"'{key}' \\({env}\\) must be over 0"):
        load_config({}, environ={env: str(value)})


def test_missing_file():
    with pytest.raises(ConfigError, match="cannot read router config"):
        load_config("/nonexistent/router.yaml")


def test_cli_reports_config_errors(tmp_path):
    bad = tmp_path / "router.yaml"
    bad.write_text("settings: {httpPort: nope}\n")
    done = subprocess.run([HEADROOM, "router", "serve", "--config", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "headroom router: settings: 'httpPort' must be an integer" in done.stderr


def test_cli_serves_until_sigterm(tmp_path):
    config = tmp_path / "router.yaml"
    config.write_text("settings: {httpPort: 0, pickPort: 0, extProcPort: 0, predictor: none, telemetry: false}\n"
                      "servers: [{id: a, address: '127.0.0.1:1'}]\n")
    process = subprocess.Popen([HEADROOM, "router", "serve", "--config", str(config)],
                               stderr=subprocess.PIPE, text=True)
    try:
        started = ""
        deadline = time.monotonic() + 60
        while "router listening" not in started and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            started += line
        assert "router listening" in started
        os.kill(process.pid, signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        log = started + process.stderr.read()
        assert log.count("router listening") == 1
        assert "router stopping: 0 requests in flight" in log and log.rstrip().endswith("router stopped")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()
