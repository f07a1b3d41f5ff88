"""``headroom autoscale ...`` end to end through the real entry point."""

from __future__ import annotations

from pathlib import Path

import pytest

from headroom.cli.main import main

AZURE = Path(__file__).resolve().parents[3] / "shared" / "traces" / "azure" / "AzureLLMInferenceTrace_conv_2023.csv"
HPA = """\
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: vllm}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: vllm}
  maxReplicas: 8
  metrics:
  - type: Pods
    pods:
      metric: {name: "vllm:num_requests_waiting"}
      target: {type: AverageValue, averageValue: "5"}
"""


@pytest.fixture
def hpa_file(tmp_path: Path) -> Path:
    path = tmp_path / "hpa.yaml"
    path.write_text(HPA)
    return path


def test_check_reports_schema_and_traps(hpa_file: Path, capsys) -> None:
    assert main(["autoscale", "check", "--hpa", str(hpa_file)]) == 0
    out = capsys.readouterr().out
    assert "valid autoscaling/v2" in out and "small-target" in out


def test_check_rejects_a_bad_manifest(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(HPA.replace("maxReplicas: 8", "maxReplicas: eight"))
    assert main(["autoscale", "check", "--hpa", str(bad)]) == 1
    assert "spec.maxReplicas: expected an integer" in capsys.readouterr().err


def test_decide_prints_the_llm_example(hpa_file: Path, capsys) -> None:
    args = ["autoscale", "decide", "--hpa", str(hpa_file), "--replicas", "4",
            "--metric", "vllm:num_requests_waiting=12,9,8,11"]
    assert main(args) == 0
    assert "4 → 8" in capsys.readouterr().out


def test_decide_rejects_an_unknown_metric(hpa_file: Path, capsys) -> None:
    assert main(["autoscale", "decide", "--hpa", str(hpa_file), "--replicas", "2", "--metric", "nope=1,2"]) == 1
    assert "not a metric" in capsys.readouterr().err


@pytest.mark.skipif(not AZURE.exists(), reason="shared traces not mounted")
def test_simulate_writes_timeline_and_plot(hpa_file: Path, tmp_path: Path, capsys) -> None:
    timeline, plot = tmp_path / "timeline.csv", tmp_path / "timeline.png"
    args = ["autoscale", "simulate", "--hpa", str(hpa_file), "--trace", str(AZURE), "--speedup", "8",
            "--limit", "1500", "--slo-ttft-ms", "500", "--timeline", str(timeline), "--plot", str(plot)]
    assert main(args) == 0
    assert "replica-hours" in capsys.readouterr().out
    rows = timeline.read_text().splitlines()
    assert rows[0].startswith("t_s,spec_replicas") and len(rows) > 10
    assert plot.read_bytes()[:4] == b"\x89PNG"


def test_simulate_refuses_a_missing_trace(hpa_file: Path, tmp_path: Path, capsys) -> None:
    assert main(["autoscale", "simulate", "--hpa", str(hpa_file), "--trace", str(tmp_path / "none.csv")]) == 1
    assert "cannot read trace" in capsys.readouterr().err


@pytest.mark.skipif(not AZURE.exists(), reason="shared traces not mounted")
def test_recommend_writes_manifest_report_and_plots(tmp_path: Path, capsys) -> None:
    out = tmp_path / "rec"
    args = ["autoscale", "recommend", "--trace", str(AZURE), "--speedup", "8", "--limit", "800",
            "--slo-ttft-p99-ms", "1000", "--max-replicas", "4", "--name", "vllm", "--out", str(out)]
    assert main(args) == 0
    assert "recommended:" in capsys.readouterr().out
    assert {p.name for p in out.iterdir()} == {"hpa.yaml", "report.md", "cost_vs_slo.png", "timeline.png"}
    manifest = (out / "hpa.yaml").read_text()
    assert "name: vllm" in manifest and "behavior:" in manifest
    assert main(["autoscale", "check", "--hpa", str(out / "hpa.yaml")]) == 0
