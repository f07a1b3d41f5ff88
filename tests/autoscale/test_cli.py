"""``headroom autoscale ...`` end to end through the real entry point."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from headroom.cli.main import main

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces"
AZURE = TRACES / "azure" / "AzureLLMInferenceTrace_conv_2023.csv"
MOONCAKE = TRACES / "mooncake" / "mooncake_fast25_synthetic_trace.jsonl"
needs_traces = pytest.mark.skipif(not AZURE.exists(), reason="shared traces not mounted")
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
CPU_HPA = HPA.split("  metrics:")[0].replace("vllm", "web")  # no metrics: CPU at 80 %


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture
def hpa_file(tmp_path: Path) -> Path:
    return write(tmp_path, "hpa.yaml", HPA)


def test_check_reports_schema_and_traps(hpa_file: Path, capsys) -> None:
    assert main(["autoscale", "check", "--hpa", str(hpa_file), "--metrics-pipeline", "gmp"]) == 0
    out = capsys.readouterr().out
    assert "valid autoscaling/v2" in out and "small-target" in out
    assert "prometheus.googleapis.com|vllm:num_requests_waiting|gauge" in out  # the name GMP serves it under


def test_check_rejects_a_bad_manifest(tmp_path: Path, capsys) -> None:
    bad = write(tmp_path, "bad.yaml", HPA.replace("maxReplicas: 8", "maxReplicas: eight"))
    assert main(["autoscale", "check", "--hpa", str(bad)]) == 1
    assert "spec.maxReplicas: expected an integer" in capsys.readouterr().err


TOLERANT = HPA + "  behavior:\n    scaleUp: {tolerance: 0.05}\n"


def test_check_against_the_clusters_kubernetes_release(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, "hpa.yaml", TOLERANT)
    assert main(["autoscale", "check", "--hpa", str(path), "--kubernetes-version", "1.32"]) == 1
    assert "'tolerance' was unexpected" in capsys.readouterr().err
    assert main(["autoscale", "check", "--hpa", str(path), "--kubernetes-version", "1.33"]) == 0
    assert "tolerance-ignored" in capsys.readouterr().out
    assert main(["autoscale", "check", "--hpa", str(path), "--kubernetes-version", "1.35"]) == 0
    assert "tolerance-" not in capsys.readouterr().out
    assert main(["autoscale", "check", "--hpa", str(path), "--kubernetes-version", "1.2"]) == 1
    assert "schemas known: 1.25.0 to" in capsys.readouterr().err


def test_check_finds_the_max_trap_in_a_keda_query(tmp_path: Path, capsys) -> None:
    scaled = write(tmp_path, "so.yaml", """\
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: vllm}
spec:
  scaleTargetRef: {name: vllm}
  minReplicaCount: 1
  triggers:
  - type: prometheus
    metadata: {serverAddress: "http://p:9090", query: "max(vllm:num_requests_waiting)", threshold: "5"}
""")
    assert main(["autoscale", "check", "--hpa", str(scaled)]) == 0
    out = capsys.readouterr().out
    assert "the HPA KEDA creates" in out and "max-query" in out


def test_decide_prints_the_llm_example_in_any_naming(tmp_path: Path, capsys) -> None:
    gmp = write(tmp_path, "gmp.yaml", HPA.replace('"vllm:num_requests_waiting"',
                                                  '"prometheus.googleapis.com|vllm:num_requests_waiting|gauge"'))
    for metric in ("vllm:num_requests_waiting", "prometheus.googleapis.com|vllm:num_requests_waiting|gauge"):
        assert main(["autoscale", "decide", "--hpa", str(gmp), "--replicas", "4",
                     "--metric", f"{metric}=12,9,8,11"]) == 0
        assert "4 → 8" in capsys.readouterr().out


def test_decide_rejects_an_unknown_metric(hpa_file: Path, capsys) -> None:
    assert main(["autoscale", "decide", "--hpa", str(hpa_file), "--replicas", "2", "--metric", "nope=1,2"]) == 1
    assert "not a metric" in capsys.readouterr().err


def test_decide_cpu_utilization_needs_requests_and_counts_unready_pods(tmp_path: Path, capsys) -> None:
    cpu = write(tmp_path, "cpu.yaml", CPU_HPA)
    assert main(["autoscale", "decide", "--hpa", str(cpu), "--replicas", "3", "--metric", "cpu=300m,500m,700m"]) == 1
    assert "missing request for cpu" in capsys.readouterr().err
    args = ["autoscale", "decide", "--hpa", str(cpu), "--replicas", "3", "--requests", "cpu=500m"]
    assert main(args + ["--metric", "cpu=600m,600m,600m"]) == 0  # 120 % of requests against 80 %
    assert "3 → 5" in capsys.readouterr().out
    assert main(args + ["--not-ready", "1", "--metric", "cpu=600m,600m,100m"]) == 0  # the unready pod counts 0
    assert "3 → 3" in capsys.readouterr().out
    assert main(args + ["--pending", "1", "--metric", "cpu=600m,600m"]) == 0  # the Pending one counts 0 too
    assert "3 → 3" in capsys.readouterr().out
    assert main(args + ["--pending", "1", "--metric", "cpu=900m,900m"]) == 0
    assert "3 → 5" in capsys.readouterr().out


def test_decide_reads_pods_as_kubectl_prints_them(tmp_path: Path, capsys) -> None:
    cpu = write(tmp_path, "cpu.yaml", CPU_HPA)
    pod = """\
  - kind: Pod
    metadata: {{name: {name}}}
    spec:
      containers:
      - {{name: app, resources: {{requests: {{cpu: 250m}}}}}}
      - {{name: side, resources: {{requests: {{cpu: 250m}}}}}}
    status:
      phase: {phase}
      startTime: "2020-01-01T00:00:00Z"
      conditions: [{{type: Ready, status: "{ready}", lastTransitionTime: "2020-01-01T00:01:00Z"}}]
"""
    listing = "apiVersion: v1\nkind: List\nitems:\n" + "".join(
        pod.format(name=n, phase=p, ready=r) for n, p, r in (("a", "Running", "True"), ("b", "Running", "True"),
                                                              ("c", "Pending", "False")))
    pods = write(tmp_path, "pods.yaml", listing)
    assert main(["autoscale", "decide", "--hpa", str(cpu), "--replicas", "3", "--pods", str(pods),
                 "--metric", "cpu=a:900m,b:900m"]) == 0  # requests summed over containers: 180 % of 500m
    assert "3 → 5" in capsys.readouterr().out


def test_decide_says_when_the_window_held_the_count(tmp_path: Path, capsys) -> None:
    hpa = write(tmp_path, "hpa.yaml", HPA)
    assert main(["autoscale", "decide", "--hpa", str(hpa), "--replicas", "4", "--metric",
                 "vllm:num_requests_waiting=1,1,1,1"]) == 0
    out = capsys.readouterr().out
    assert "held at 4 by the scale-down stabilization window" in out and "within tolerance" not in out


@needs_traces
def test_simulate_writes_timeline_and_plot_with_plain_progress(hpa_file: Path, tmp_path: Path, capsys) -> None:
    timeline, plot = tmp_path / "timeline.csv", tmp_path / "timeline.png"
    args = ["autoscale", "simulate", "--hpa", str(hpa_file), "--trace", str(AZURE), "--speedup", "8",
            "--limit", "1500", "--slo-ttft-ms", "500", "--timeline", str(timeline), "--plot", str(plot)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "replica-hours" in out
    assert re.search(r"simulating: \d+ of \d+ virtual s, .* elapsed, ETA", out)  # stdout is not a terminal
    rows = timeline.read_text().splitlines()
    assert rows[0].startswith("t_s,spec_replicas") and len(rows) > 10
    assert plot.read_bytes()[:4] == b"\x89PNG"


@needs_traces
def test_simulate_replays_the_mooncake_trace_and_initial_replicas(hpa_file: Path, capsys) -> None:
    args = ["autoscale", "simulate", "--hpa", str(hpa_file), "--trace", str(MOONCAKE), "--limit", "200",
            "--initial-replicas", "3"]
    assert main(args) == 0
    assert "200 (0)" in capsys.readouterr().out


def test_simulate_refuses_a_trace_it_cannot_read_in_one_line(hpa_file: Path, tmp_path: Path, capsys) -> None:
    assert main(["autoscale", "simulate", "--hpa", str(hpa_file), "--trace", str(tmp_path / "none.csv")]) == 1
    assert "cannot read trace" in capsys.readouterr().err
    other = write(tmp_path, "other.jsonl", '{"ts": 1, "prompt": "' + "x" * 5000 + '"}\n')
    assert main(["autoscale", "simulate", "--hpa", str(hpa_file), "--trace", str(other)]) == 1
    err = capsys.readouterr().err.strip()
    assert "TIMESTAMP, ContextTokens, GeneratedTokens" in err and "input_length" in err
    assert len(err.splitlines()) == 1 and len(err) < 400


def test_simulate_refuses_a_metric_the_pool_does_not_export(tmp_path: Path, capsys) -> None:
    slots = write(tmp_path, "slots.yaml", HPA.replace('"vllm:num_requests_waiting"',
                                                      '"jetstream_slots_used_percentage"'))
    trace = write(tmp_path, "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,100,10\n")
    assert main(["autoscale", "simulate", "--hpa", str(slots), "--trace", str(trace)]) == 1
    assert "does not export jetstream_slots_used_percentage" in capsys.readouterr().err


@needs_traces
def test_recommend_then_simulate_reproduces_the_reported_figures(tmp_path: Path, capsys) -> None:
    """The invariant, as a user runs it: the written ScaledObject replays to the recommended figures."""
    out = tmp_path / "rec"
    args = ["autoscale", "recommend", "--trace", str(MOONCAKE), "--limit", "1200", "--slo-ttft-p99-ms", "5000",
            "--max-replicas", "6", "--metrics-pipeline", "keda", "--no-router-signals", "--name", "vllm",
            "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert re.search(r"closed-loop runs: \d+ of \d+ runs", printed)
    assert {"scaledobject.yaml", "podmonitoring.yaml", "report.md"} <= {p.name for p in out.iterdir()}
    reported = re.search(r"recommended: .*: ([\d.]+) replica-hours, TTFT p99 (\d+) ms, ([\d.]+%) within", printed)
    command = re.search(r"reproduce: (.*)", printed).group(1)
    assert command in (out / "report.md").read_text()
    assert main(shlex.split(command)[1:]) == 0
    replayed = capsys.readouterr().out
    assert re.search(rf"replica-hours\s*│\s*{re.escape(reported.group(1))}\b", replayed)
    assert re.search(rf"/ {reported.group(2)} ms", replayed)
    assert re.search(rf"TTFT ≤ 5000 ms\s*│\s*{re.escape(reported.group(3))}", replayed)
    assert main(["autoscale", "check", "--hpa", str(out / "scaledobject.yaml")]) == 0


@needs_traces
def test_recommend_says_when_the_trace_never_exercised_scaling(tmp_path: Path, capsys) -> None:
    args = ["autoscale", "recommend", "--trace", str(AZURE), "--limit", "2000", "--slo-ttft-p99-ms", "2000",
            "--max-replicas", "4", "--no-router-signals", "--out", str(tmp_path / "rec")]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "never exercised scaling" in out and "--speedup" in out
    assert not (tmp_path / "rec" / "hpa.yaml").exists()


@needs_traces
def test_recommend_says_why_nothing_meets_the_slo_at_once(tmp_path: Path, capsys) -> None:
    args = ["autoscale", "recommend", "--trace", str(AZURE), "--limit", "3000", "--speedup", "20",
            "--slo-ttft-p99-ms", "50", "--max-replicas", "2", "--no-router-signals", "--out", str(tmp_path / "rec")]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "no configuration met the SLO: even 2 fixed servers (--max-replicas) miss it" in out
    assert "closed-loop runs: 1 of" not in out  # no autoscaler was tried: none could meet it
    assert "raise --max-replicas" in (tmp_path / "rec" / "report.md").read_text()
