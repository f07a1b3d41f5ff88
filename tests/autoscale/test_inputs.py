"""What the commands read besides manifests: trace files of either format, pod listings, Kubernetes releases."""

from __future__ import annotations

from pathlib import Path

import pytest

from headroom.autoscale import versions
from headroom.autoscale.errors import ManifestError, SpecError
from headroom.autoscale.podlist import described_pods, pods_from_yaml
from headroom.autoscale.pods import PodPhase
from headroom.sim.traces import TraceError, load_trace, trace_format

AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,100,10\n2023-11-16 18:15:47.68,200,20\n"
MOONCAKE = ('{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [1, 2, 3]}\n'
            '{"timestamp": 500, "input_length": 600, "output_length": 9, "hash_ids": [1, 2]}\n')


@pytest.mark.parametrize("text, kind, prefixes", [(AZURE, "azure", 0), (MOONCAKE, "mooncake", 37)],
                         ids=["azure", "mooncake"])
def test_both_trace_formats_are_recognised(tmp_path: Path, text: str, kind: str, prefixes: int) -> None:
    path = tmp_path / "trace"
    path.write_text(text)
    assert trace_format(path) == kind
    requests = load_trace(path, speedup=2.0, prefixes=None)
    assert [r.arrival_s for r in requests] == [0.0, 0.5 if kind == "azure" else 0.25]
    assert len(requests[1].prefix_hashes) == prefixes


@pytest.mark.parametrize("text", ['{"time": 1, "tokens": 5}\n', "a,b,c\n1,2,3\n", "", "not json {\n"],
                         ids=["other-json", "other-csv", "empty", "garbage"])
def test_other_files_are_refused_naming_the_expected_columns(tmp_path: Path, text: str) -> None:
    path = tmp_path / "trace"
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        trace_format(path)
    assert "TIMESTAMP, ContextTokens, GeneratedTokens" in str(info.value) and "\n" not in str(info.value)


def test_pods_as_kubectl_lists_them() -> None:
    text = """\
kind: List
items:
- metadata: {name: a, deletionTimestamp: "2024-01-01T00:00:10Z"}
  spec: {containers: [{resources: {requests: {cpu: 500m, memory: 1Gi}}}, {resources: {requests: {cpu: "1"}}}]}
  status: {phase: Running, startTime: "2024-01-01T00:00:00Z",
           conditions: [{type: Ready, status: "True", lastTransitionTime: "2024-01-01T00:00:05Z"}]}
- metadata: {name: b}
  status: {phase: Pending}
"""
    a, b = pods_from_yaml(text)
    assert (a.name, a.phase, a.ready, a.deleting, a.requests["cpu"]) == ("a", PodPhase.RUNNING, True, True, 1500)
    assert a.ready_changed_at - a.started_at == 5.0
    assert (b.phase, b.ready, b.started_at) == (PodPhase.PENDING, None, None)
    with pytest.raises(ManifestError, match="items\\[0\\].status.phase"):
        pods_from_yaml(text.replace("phase: Running", "phase: Sleeping"))


def test_described_pods() -> None:
    pods = described_pods(4, {"cpu": 1000}, not_ready=1, pending=1)
    assert [(p.phase, p.ready) for p in pods] == [(PodPhase.RUNNING, True), (PodPhase.RUNNING, True),
                                                  (PodPhase.RUNNING, False), (PodPhase.PENDING, False)]
    with pytest.raises(ManifestError):
        described_pods(2, {}, not_ready=2, pending=1)


@pytest.mark.parametrize("text, release", [("1.33", (1, 33)), ("v1.35.2", (1, 35)), ("1.34.1-gke.1200", (1, 34))])
def test_kubernetes_releases(text: str, release: tuple[int, int]) -> None:
    assert versions.release(text) == release


def test_a_release_that_is_not_one() -> None:
    with pytest.raises(SpecError, match="expected major.minor"):
        versions.release("latest")
