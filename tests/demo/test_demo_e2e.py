"""`headroom demo` as real processes: in a short form it learns, routes with its models beside the heuristic
baseline, prices the slowed servers slower, loses no telemetry, draws its plots and leaves nothing running; without
the traces it fails before starting anything; on Ctrl-C it stops everything and leaves a partial report."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import polars as pl
import pytest

from headroom.contract.settings import from_env
from headroom.localkafka import broker
from headroom.localkafka.settings import BrokerSettings
from tests.conftest import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]


def demo_env(tmp_path):
    kafka_port, controller_port = free_port(), free_port()
    env = {**os.environ, "HEADROOM_KAFKA_PORT": str(kafka_port), "HEADROOM_KAFKA_CONTROLLER_PORT": str(controller_port),
           "HEADROOM_DEMO_STATE_DIR": str(tmp_path / "state"),
           "HEADROOM_DEMO_BASE_PORT": str(random.randrange(21000, 29000, 30))}
    settings = from_env(BrokerSettings, port=kafka_port, controller_port=controller_port, state_dir=tmp_path / "state")
    return env, settings


def test_short_demo_learns_routes_and_prices_the_slowed_servers_slower(tmp_path):
    env, settings = demo_env(tmp_path)
    done = subprocess.run([sys.executable, "-m", "headroom.cli.main", "demo", "--duration", "60", "--report-dir",
                           str(tmp_path / "report")], env=env, capture_output=True, text=True, timeout=420)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    report = json.loads((tmp_path / "report" / "demo.json").read_text())
    headroom, baseline = report["arms"]["headroom"]["whole"], report["arms"]["baseline"]["whole"]

    for component in ("Kafka broker", "worker", "router (headroom)", "router (baseline)"):
        assert f"{component}" in done.stdout and component in report["components"]
    assert report["promotions"] >= 1
    assert report["model_versions"], "the router used no model version"
    assert report["heuristic_share_after_warmup"] < 0.2
    assert report["decision_ms"]["headroom"] > 0 and report["decision_ms"]["baseline"] > 0
    peaks = report["peak_corrections_after_change"]  # two H100s run 2× slower: priced slower than the models say
    assert (peaks["h100-0"]["tpot"] + peaks["h100-1"]["tpot"]) / 2 > 1.3, peaks
    assert headroom["completed"] > 300 and headroom["failed"] == 0
    assert baseline["requests"] == headroom["requests"] and baseline["failed"] == 0  # the same arrivals
    assert report["telemetry_in_kafka"] == headroom["completed"]  # the baseline sends none
    assert report["processes_left"] == [] and not report["interrupted"]
    assert len(report["host"]["load_average_at_start"]) == 3
    markdown = (tmp_path / "report" / "demo.md").read_text()
    assert "What headroom bought" in markdown and "Window by window" in markdown and "load average" in markdown
    assert f"held before sending them (late everywhere in a burst): {report['held']:.0f}" in markdown
    assert report["windows_after"]["windows"] == 6 and report["changes_made"]  # 30 s after the change at 30 s
    assert "of capacity" in report["scenario"]
    for plot in ("timeline.png", "predicted_vs_actual.png"):
        assert (tmp_path / "report" / plot).stat().st_size > 10_000 and f"]({plot})" in markdown
    requests = pl.read_parquet(tmp_path / "report" / "requests.parquet")  # what the numbers are drawn from
    assert requests.height == headroom["requests"] + baseline["requests"]
    assert set(requests["arm"]) == {"headroom", "baseline"}
    records = pl.read_parquet(tmp_path / "report" / "telemetry.parquet")
    assert records.height == report["telemetry_in_kafka"] and records["server_id"].n_unique() == 4
    assert not broker.status(settings).running


def test_without_the_traces_it_fails_at_once_saying_what_is_missing(tmp_path):
    env, _ = demo_env(tmp_path)
    env["HEADROOM_TRACES_DIR"] = str(tmp_path / "a-clone-without-traces")
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "headroom.cli.main", "demo", "--report-dir", str(tmp_path / "r")],
                          env=env, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - began
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot start the demo" in done.stderr and "AzureLLMInferenceTrace_conv_2023.csv" in done.stderr
    assert "github.com/Azure/AzurePublicDataset" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "state").exists()  # nothing was started: the broker's state is made first
    print(f"failed after {took:.2f} s, interpreter start included")


def test_ctrl_c_stops_everything_and_leaves_a_partial_report(tmp_path):
    env, settings = demo_env(tmp_path)
    process = subprocess.Popen([sys.executable, "-m", "headroom.cli.main", "demo", "--duration", "120",
                                "--report-dir", str(tmp_path / "report")], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        seen = ""
        deadline = time.monotonic() + 240
        while "load:" not in seen and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            seen += line
        assert "load:" in seen, seen
        time.sleep(10)  # some load through both arms
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, out[-3000:]
    assert "interrupted: stopping every component" in out and "partial report:" in out
    assert "Traceback" not in out, out[max(out.find("Traceback") - 400, 0):][:3000]
    report = json.loads((tmp_path / "report" / "demo.json").read_text())
    assert report["interrupted"] and 5 < report["load_seconds"] < 60
    assert report["arms"]["headroom"]["whole"]["requests"] > 0
    assert report["arms"]["baseline"]["whole"]["requests"] > 0  # (requests in flight at the interrupt count in neither)
    assert report["processes_left"] == []
    assert "(interrupted: a partial report)" in (tmp_path / "report" / "demo.md").read_text()
    assert (tmp_path / "report" / "timeline.png").exists()
    assert not broker.status(settings).running
