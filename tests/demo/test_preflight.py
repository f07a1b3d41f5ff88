"""The demo's preconditions, each reported with what is missing and where to get it — before anything starts."""

import socket

import pytest

from headroom.contract.settings import from_env
from headroom.demo.preflight import problems
from headroom.localkafka.settings import BrokerSettings
from headroom.sim.traces import TraceSettings
from tests.conftest import free_port


@pytest.fixture
def broker(tmp_path):
    return from_env(BrokerSettings, {}, state_dir=tmp_path / "state")


def test_a_ready_machine_has_no_problem(broker, tmp_path):
    assert problems(from_env(TraceSettings), broker, [free_port()], [tmp_path / "report"]) == []


def test_missing_traces_say_which_file_and_where_to_get_it(broker, tmp_path):
    found = problems(TraceSettings(traces_dir=tmp_path / "no-traces"), broker, [], [])
    assert len(found) == 1
    assert "AzureLLMInferenceTrace_conv_2023.csv" in found[0] and "github.com/Azure/AzurePublicDataset" in found[0]
    assert "HEADROOM_TRACES_DIR" in found[0]


def test_a_port_in_use_is_named(broker):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (found,) = problems(from_env(TraceSettings), broker, [port, free_port()], [])
    assert f"port(s) {port} " in found and "HEADROOM_DEMO_BASE_PORT" in found


def test_without_java_or_maven_and_jars_each_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    broker = from_env(BrokerSettings, {}, state_dir=tmp_path / "state", jar_cache=tmp_path / "no-jars")
    found = problems(from_env(TraceSettings), broker, [], [])
    assert any("Java 17+ is needed" in p for p in found)
    assert any("Maven (mvn)" in p and str(tmp_path / "no-jars") in p for p in found)


def test_a_folder_that_cannot_be_made_is_named(broker, tmp_path):
    blocker = tmp_path / "report"
    blocker.write_text("a file where the report folder should go")
    found = problems(from_env(TraceSettings), broker, [], [blocker / "demo"])
    assert found == [f"cannot write to {blocker / 'demo'}: {blocker} is not a folder"]
