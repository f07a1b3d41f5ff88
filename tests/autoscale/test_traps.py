"""Known traps found in HPA specs and ScaledObjects, and the fields each Kubernetes release rejects or ignores."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest

from headroom.autoscale import versions
from headroom.autoscale.documents import Autoscaler, load_autoscaler
from headroom.autoscale.pipelines import Pipeline
from headroom.autoscale.promql import parse_query
from headroom.autoscale.servers import ModelServer
from headroom.autoscale.spec import (
    DEFAULT_SCALE_UP,
    Behavior,
    HpaSpec,
    MetricSpec,
    MetricTarget,
    SourceType,
    TargetType,
)
from headroom.autoscale.traps import find_traps

GMP_QUEUE = "prometheus.googleapis.com|vllm:num_requests_waiting|gauge"


def pods(name: str, target_milli: int) -> MetricSpec:
    return MetricSpec(SourceType.PODS, name, MetricTarget(TargetType.AVERAGE_VALUE, target_milli))


def keda(query: str, kind: TargetType = TargetType.AVERAGE_VALUE) -> Autoscaler:
    metric = MetricSpec(SourceType.EXTERNAL, "s0-prometheus", MetricTarget(kind, 5000))
    return Autoscaler(HpaSpec(max_replicas=5, metrics=(metric,), behavior=Behavior()),
                      queries={"s0-prometheus": parse_query(query)})


CASES = {
    "small-target": (HpaSpec(max_replicas=5, metrics=(pods("vllm:num_requests_waiting", 5000),)), "small-target"),
    "small-target-any-naming": (HpaSpec(max_replicas=5, metrics=(pods(GMP_QUEUE, 5000),)), "small-target"),
    "max-query-by-name": (HpaSpec(max_replicas=5, metrics=(MetricSpec(SourceType.EXTERNAL, "max_queue_size",
                                                                      MetricTarget(TargetType.VALUE, 10_000)),)),
                          "max-query"),
    "max-query-keda": (keda("max(vllm:num_requests_waiting)"), "max-query"),
    "max-query-keda-grouped": (keda("max by (model_name) (jetstream_prefill_backlog_size)"), "max-query"),
    "average-of-average": (keda("avg(vllm:num_requests_waiting)"), "average-of-average"),
    "memory-bytes": (HpaSpec(max_replicas=5, metrics=(MetricSpec(SourceType.RESOURCE, "memory",
                                                                 MetricTarget(TargetType.UTILIZATION, 80)),)),
                     "memory-bytes"),
    "queue-with-memory": (HpaSpec(max_replicas=5, metrics=(pods("vllm:num_requests_waiting", 20_000),
                                                           pods("vllm:kv_cache_usage_perc", 800))),
                          "queue-with-memory"),
    "broken-metric": (HpaSpec(max_replicas=5, metrics=(pods("a", 20_000), pods("b", 20_000))), "broken-metric"),
    "legacy-behavior": (HpaSpec(max_replicas=5, metrics=(pods("a", 20_000),)), "legacy-behavior"),
    "slow-load": (HpaSpec(max_replicas=5, metrics=(pods("a", 20_000),), behavior=Behavior()), "slow-load"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_trap_is_found(case) -> None:
    spec, code = case
    assert code in {t.code for t in find_traps(spec, load_delay_s=45.0)}


def test_a_sound_spec_has_no_traps() -> None:
    spec = HpaSpec(max_replicas=5, metrics=(pods("vllm:num_requests_waiting", 20_000),), behavior=Behavior())
    assert find_traps(spec, load_delay_s=10.0) == []
    assert find_traps(keda("sum(vllm:num_requests_waiting{namespace='llm'})"), load_delay_s=10.0) == []


@pytest.mark.parametrize("name, pipeline, expected", [
    ("vllm:num_requests_waiting", Pipeline.GMP, GMP_QUEUE),
    (GMP_QUEUE, Pipeline.PROMETHEUS_ADAPTER, "vllm_num_requests_waiting"),
    ("vllm_num_requests_waiting", Pipeline.GMP, GMP_QUEUE),
    (GMP_QUEUE, Pipeline.KEDA, "s<index>-prometheus"),
], ids=["bare-on-gmp", "gmp-on-adapter", "adapter-on-gmp", "pods-on-keda"])
def test_a_name_the_pipeline_does_not_serve(name: str, pipeline: Pipeline, expected: str) -> None:
    spec = HpaSpec(max_replicas=5, metrics=(pods(name, 20_000),), behavior=Behavior())
    found = [t for t in find_traps(spec, pipeline=pipeline) if t.code == "pipeline-name"]
    assert len(found) == 1 and repr(expected) in found[0].message
    served = HpaSpec(max_replicas=5, metrics=(pods(GMP_QUEUE, 20_000),), behavior=Behavior())
    assert not [t for t in find_traps(served, pipeline=Pipeline.GMP) if t.code == "pipeline-name"]


def test_a_metric_the_model_server_does_not_export() -> None:
    spec = HpaSpec(max_replicas=5, metrics=(pods("jetstream_slots_used_percentage", 900),), behavior=Behavior())
    assert "unexported-metric" in {t.code for t in find_traps(spec, model_server=ModelServer("vllm"))}
    assert "unexported-metric" not in {t.code for t in find_traps(spec, model_server=ModelServer("jetstream"))}


TOLERANT = HpaSpec(max_replicas=5, metrics=(pods("vllm:num_requests_waiting", 20_000),),
                   behavior=Behavior(scale_up=DEFAULT_SCALE_UP.__class__(DEFAULT_SCALE_UP.policies, tolerance=0.05)))


@pytest.mark.parametrize("version, code", [
    ("1.32", "tolerance-rejected"), ("1.33", "tolerance-ignored"), ("1.34.2", "tolerance-ignored"),
    ("v1.35.0-gke.1", None), ("1.37", None),
])
def test_tolerance_by_kubernetes_release(version: str, code: str | None) -> None:
    codes = {t.code for t in find_traps(TOLERANT, kubernetes_version=version)} & {"tolerance-rejected",
                                                                                   "tolerance-ignored"}
    assert codes == ({code} if code else set())


SCHEMAS = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"


@pytest.mark.parametrize("version", ["1.32", "1.33", "1.34", "1.35", "1.36"])
def test_the_tolerance_facts_match_the_release_schemas(version: str) -> None:
    """The release table in autoscale.versions agrees with the OpenAPI schemas Kubernetes published."""
    schema = json.loads((SCHEMAS / f"v{version}.0-local-strict" / "hpascalingrules-autoscaling-v2.json").read_text())
    release = versions.release(version)
    assert ("tolerance" in schema["properties"]) == (release >= versions.TOLERANCE_FIELD)
    if "tolerance" in schema["properties"]:
        alpha = "alpha" in schema["properties"]["tolerance"]["description"]
        assert alpha == (release < versions.TOLERANCE_ON_BY_DEFAULT)


def test_container_metrics_before_they_were_on_by_default() -> None:
    metric = MetricSpec(SourceType.CONTAINER_RESOURCE, "cpu", MetricTarget(TargetType.UTILIZATION, 60),
                        container="server")
    spec = HpaSpec(max_replicas=5, metrics=(metric,), behavior=Behavior())
    assert "container-metrics-gate" in {t.code for t in find_traps(spec, kubernetes_version="1.26")}
    assert "container-metrics-gate" not in {t.code for t in find_traps(spec, kubernetes_version="1.27")}


def test_max_query_of_an_adapter_external_rule() -> None:
    text = """\
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: vllm}
spec:
  scaleTargetRef: {kind: Deployment, name: vllm}
  maxReplicas: 8
  metrics:
  - type: External
    external:
      metric: {name: busiest_queue}
      target: {type: AverageValue, averageValue: "4"}
---
rules:
  external:
  - seriesQuery: vllm:num_requests_waiting
    name: {as: busiest_queue}
    metricsQuery: max(vllm:num_requests_waiting{<<.LabelMatchers>>})
"""
    autoscaler = load_autoscaler(text)
    assert "max-query" in {t.code for t in find_traps(autoscaler)}
