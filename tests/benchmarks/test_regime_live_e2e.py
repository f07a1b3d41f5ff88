"""The live regime benchmark on real processes, briefly: one scenario, one seed, 20 s of load through both arms
(the servers at three times the scenarios' speed, so that the last streams end within seconds of the load), the
membership change read by both routers from their server files, a report, and nothing left running."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headroom.contract.settings import from_env
from headroom.localkafka import broker
from headroom.localkafka.settings import BrokerSettings
from tests.conftest import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]

CHECKOUT = Path(__file__).resolve().parents[2]


def test_a_short_replace_scenario_runs_both_arms_and_reports_them(tmp_path):
    kafka_port, controller_port = free_port(), free_port()
    env = {**os.environ, "HEADROOM_KAFKA_PORT": str(kafka_port), "HEADROOM_KAFKA_CONTROLLER_PORT": str(controller_port)}
    done = subprocess.run([sys.executable, "-m", "headroom.benchmarks.regime_live", "--scenario", "replace",
                           "--seeds", "1", "--duration", "20", "--time-scale", "0.3", "--out", str(tmp_path / "out"),
                           "--state-dir", str(tmp_path / "state")],
                          cwd=CHECKOUT, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    report = json.loads((tmp_path / "out" / "regime-live.json").read_text())
    (summary,) = report["scenarios"]
    assert summary["scenario"] == "replace" and summary["change_at_s"] == 10.0 and summary["reference"] == "baseline"
    headroom, baseline = summary["policies"]["headroom"], summary["policies"]["baseline"]
    assert [w["start_s"] for w in headroom["windows"]] == [0.0, 5.0, 10.0, 15.0]
    assert [w["requests"] for w in headroom["windows"]] == [w["requests"] for w in baseline["windows"]]  # same arrivals
    assert sum(w["requests"] for w in headroom["windows"]) > 50
    for arm in (headroom, baseline):
        assert 0.0 <= arm["whole"]["attainment"] <= 1.0 and arm["whole"]["ttft_p99_ms"] > 0
    (run,) = summary["runs"]
    assert run["failed"] == {"headroom": 0, "baseline": 0}
    assert [c["change"] for c in run["changes_made"]] == ["h100-3 joins the pool and h100-0 leaves it (draining)"]
    assert len(run["load_average"]) == 2 and len(summary["recovery_s"]) == 1
    for arm, served in run["served"].items():  # every request is counted on the server its router named
        assert sum(sum(tally[part][0] for part in ("before", "after")) for tally in served.values()) == \
            sum(w["requests"] for w in summary["policies"][arm]["windows"])
        assert served["h100-3"]["before"][0] == 0 < served["h100-3"]["after"][0] and "none" not in served
    for arm in ("headroom", "baseline"):  # each router read the new server list while the load went on
        assert "server list changed: 4 servers" in (tmp_path / "state" / "logs" / f"router-{arm}.log").read_text()
    markdown = (tmp_path / "out" / "regime-live.md").read_text()
    assert "### replace:" in markdown and "load average per run" in markdown and "Time to recover" in markdown
    settings = from_env(BrokerSettings, port=kafka_port, controller_port=controller_port, state_dir=tmp_path / "state")
    assert not broker.status(settings).running
