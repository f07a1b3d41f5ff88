"""Reading and writing autoscaling/v2 HPA manifests; emitted YAML validated against the Kubernetes schema."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from headroom.autoscale.errors import ManifestError
from headroom.autoscale.manifest import emit_manifest, parse_manifest
from headroom.autoscale.spec import (
    Behavior,
    HpaSpec,
    MetricSpec,
    MetricTarget,
    ObjectReference,
    PolicyType,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
    SourceType,
    TargetType,
)

QUEUE_HPA = """
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: vllm, namespace: llm}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: vllm}
  minReplicas: 2
  maxReplicas: 12
  metrics:
  - type: Pods
    pods:
      metric: {name: "vllm:num_requests_waiting"}
      target: {type: AverageValue, averageValue: "4500m"}
  behavior:
    scaleDown:
      stabilizationWindowSeconds: 120
      tolerance: 0.05
"""

EVERY_SOURCE = HpaSpec(
    name="every-source", namespace="llm", min_replicas=1, max_replicas=30,
    metrics=(
        MetricSpec(SourceType.RESOURCE, "cpu", MetricTarget(TargetType.UTILIZATION, 70)),
        MetricSpec(SourceType.CONTAINER_RESOURCE, "memory", MetricTarget(TargetType.AVERAGE_VALUE, 2**30 * 1000),
                   container="server"),
        MetricSpec(SourceType.PODS, "vllm:kv_cache_usage_perc", MetricTarget(TargetType.AVERAGE_VALUE, 800)),
        MetricSpec(SourceType.OBJECT, "requests_per_second", MetricTarget(TargetType.VALUE, 100_000),
                   described_object=ObjectReference("Service", "vllm", "v1")),
        MetricSpec(SourceType.EXTERNAL, "prefill_backlog", MetricTarget(TargetType.AVERAGE_VALUE, 3000),
                   selector={"pool": "a100"}),
    ),
    behavior=Behavior(
        scale_up=ScalingRules((ScalingPolicy(PolicyType.PODS, 2, 60),), SelectPolicy.MIN, 30, tolerance=0.02),
        scale_down=ScalingRules((ScalingPolicy(PolicyType.PERCENT, 10, 60),), SelectPolicy.MAX, 600)),
)


def test_parse_applies_kubernetes_defaults() -> None:
    spec = parse_manifest(QUEUE_HPA)
    assert spec.metrics[0].target.amount == 4500
    assert spec.behavior is not None
    assert spec.behavior.scale_up.policies == (ScalingPolicy(PolicyType.PODS, 4, 15),
                                               ScalingPolicy(PolicyType.PERCENT, 100, 15))
    assert spec.behavior.scale_down.stabilization_window_seconds == 120
    assert spec.behavior.scale_down.tolerance == 0.05


def test_empty_metrics_default_to_cpu_80() -> None:
    spec = parse_manifest(QUEUE_HPA.split("  metrics:")[0])
    assert [(m.source, m.name, m.target.amount) for m in spec.metrics] == [(SourceType.RESOURCE, "cpu", 80)]
    assert spec.behavior is None


@pytest.mark.parametrize("spec", [EVERY_SOURCE, parse_manifest(QUEUE_HPA), HpaSpec(max_replicas=3)],
                         ids=["every-source", "queue", "legacy-defaults"])
def test_round_trip(spec: HpaSpec) -> None:
    assert parse_manifest(emit_manifest(spec)) == spec


@pytest.mark.parametrize("spec", [EVERY_SOURCE, parse_manifest(QUEUE_HPA), HpaSpec(max_replicas=3)],
                         ids=["every-source", "queue", "legacy-defaults"])
def test_emitted_yaml_validates_against_the_kubernetes_schema(spec: HpaSpec) -> None:
    document = yaml.safe_load(emit_manifest(spec))
    kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)


def test_schema_check_catches_a_broken_document() -> None:
    document = yaml.safe_load(emit_manifest(EVERY_SOURCE))
    document["spec"]["behavior"]["scaleUp"]["policies"][0]["value"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(document, kubernetes_validate.latest_version(), strict=True)


BAD = {
    "wrong-api-version": (QUEUE_HPA.replace("autoscaling/v2", "autoscaling/v1"), "apiVersion"),
    "missing-max": (QUEUE_HPA.replace("  maxReplicas: 12\n", ""), "spec.maxReplicas: required"),
    "unknown-field": (QUEUE_HPA.replace("  minReplicas: 2", "  minReplica: 2"), "unknown field(s) minReplica"),
    "utilization-on-pods": (QUEUE_HPA.replace("{type: AverageValue, averageValue: \"4500m\"}",
                                              "{type: Utilization, averageUtilization: 50}"),
                            "spec.metrics[0].pods"),
    "bad-quantity": (QUEUE_HPA.replace('"4500m"', '"lots"'), "spec.metrics[0].pods.target.averageValue"),
    "window-too-long": (QUEUE_HPA.replace("120", "4000"), "stabilizationWindowSeconds must be in [0, 3600]"),
    "max-below-min": (QUEUE_HPA.replace("maxReplicas: 12", "maxReplicas: 1"), "maxReplicas (1)"),
    "not-yaml": ("spec: [unclosed", "not valid YAML"),
    "negative-tolerance": (QUEUE_HPA.replace("tolerance: 0.05", "tolerance: -1"), "tolerance must be >= 0"),
}


@pytest.mark.parametrize("case", BAD.values(), ids=BAD.keys())
def test_bad_manifests_name_the_problem(case: tuple[str, str]) -> None:
    text, fragment = case
    with pytest.raises(ManifestError) as info:
        parse_manifest(text)
    assert fragment in str(info.value)


def test_references_without_api_version_read() -> None:
    spec = parse_manifest(QUEUE_HPA.replace("{apiVersion: apps/v1, kind: Deployment, name: vllm}",
                                            "{kind: Deployment, name: vllm}"))
    assert (spec.target_ref.kind, spec.target_ref.api_version) == ("Deployment", "")
