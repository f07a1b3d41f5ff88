"""The demo's supervisor runs real `headroom` processes, reports a failed start with its log, and stops all."""

import urllib.request

import pytest

from headroom.demo.processes import ComponentFailed, Supervisor
from tests.conftest import free_port


def answers(url: str):
    def check() -> bool:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    return check


def test_started_components_are_ready_and_all_stop(tmp_path):
    supervisor = Supervisor(tmp_path)
    port = free_port()
    component = supervisor.start("sim", ["sim", "serve", "--servers", "1", "--base-port", str(port)],
                                 ready=answers(f"http://127.0.0.1:{port}/health"), timeout_s=60)
    supervisor.check()
    assert supervisor.stop() == []
    assert component.process.poll() is not None
    assert supervisor.components == []


def test_a_component_that_exits_is_reported_with_its_log(tmp_path):
    supervisor = Supervisor(tmp_path)
    with pytest.raises(ComponentFailed, match="router exited with code 1"):
        supervisor.start("router", ["router", "serve", "--config", str(tmp_path / "missing.yaml")],
                         ready=lambda: False, timeout_s=60)
    supervisor.stop()
    assert "missing.yaml" in (tmp_path / "router.log").read_text()
