"""Metric names per pipeline, both ways; the objects that make a metric exist; KEDA ScaledObjects; PromQL."""

from __future__ import annotations

import pytest
import yaml

from headroom.autoscale.documents import load_autoscaler
from headroom.autoscale.errors import ManifestError, SpecError
from headroom.autoscale.keda import hpa_from_scaled_object, scaled_object
from headroom.autoscale.pipelines import Binding, Pipeline, Workload, adapter_queries, binding, companions, hpa_metric
from headroom.autoscale.promql import aggregates_with_max, parse_query
from headroom.autoscale.spec import MetricSpec, MetricTarget, SourceType, TargetType
from headroom.contract.scaling_signals import Signal

WORKLOAD = Workload("vllm", "llm")


@pytest.mark.parametrize("signal", list(Signal), ids=lambda s: s.value)
@pytest.mark.parametrize("pipeline", [Pipeline.GMP, Pipeline.PROMETHEUS_ADAPTER], ids=lambda p: p.value)
def test_every_signal_named_by_a_pipeline_binds_back(signal: Signal, pipeline: Pipeline) -> None:
    metric = hpa_metric(signal, 5000, pipeline, WORKLOAD)
    assert binding(metric) == Binding(signal, None if metric.source is SourceType.PODS else "sum")


@pytest.mark.parametrize("signal, pipeline, name", [
    (Signal.QUEUE_SIZE, Pipeline.GMP, "prometheus.googleapis.com|vllm:num_requests_waiting|gauge"),
    (Signal.SLOTS_USED, Pipeline.GMP, "prometheus.googleapis.com|jetstream_slots_used_percentage|gauge"),
    (Signal.TTFT_SLO_RATIO, Pipeline.GMP, "prometheus.googleapis.com|headroom_predicted_ttft_slo_ratio|gauge"),
    (Signal.HBM_USED_BYTES, Pipeline.GMP, "kubernetes.io|container|accelerator|memory_used"),
    (Signal.QUEUE_SIZE, Pipeline.PROMETHEUS_ADAPTER, "vllm_num_requests_waiting"),
    (Signal.QUEUE_SIZE, Pipeline.KEDA, "s0-prometheus"),
])
def test_names_as_each_pipeline_serves_them(signal: Signal, pipeline: Pipeline, name: str) -> None:
    assert hpa_metric(signal, 5000, pipeline, WORKLOAD).name == name


@pytest.mark.parametrize("name", ["vllm:num_requests_waiting", "vllm_num_requests_waiting",
                                  "prometheus.googleapis.com|vllm:num_requests_waiting|gauge"])
def test_a_real_hpa_names_its_metric_any_way(name: str) -> None:
    metric = MetricSpec(SourceType.PODS, name, MetricTarget(TargetType.AVERAGE_VALUE, 5000))
    assert binding(metric) == Binding(Signal.QUEUE_SIZE)


def test_unknown_series_and_unresolved_keda_names_are_refused() -> None:
    unknown = MetricSpec(SourceType.PODS, "tgi_queue_size", MetricTarget(TargetType.AVERAGE_VALUE, 5000))
    with pytest.raises(SpecError, match="'tgi_queue_size' is no series"):
        binding(unknown)
    keda = MetricSpec(SourceType.EXTERNAL, "s0-prometheus", MetricTarget(TargetType.AVERAGE_VALUE, 5000))
    with pytest.raises(SpecError, match="give the ScaledObject"):
        binding(keda)


def test_gmp_scrapes_the_servers_and_the_router_without_its_own_pod_label() -> None:
    (servers,) = companions(Signal.QUEUE_SIZE, Pipeline.GMP, WORKLOAD)
    assert servers["kind"] == "PodMonitoring" and servers["spec"]["selector"]["matchLabels"] == {"app": "vllm"}
    (router,) = companions(Signal.TTFT_SLO_RATIO, Pipeline.GMP, WORKLOAD)
    assert router["spec"]["selector"]["matchLabels"] == {"app": "headroom-router"}
    assert "pod" not in router["spec"]["targetLabels"]["metadata"]
    assert companions(Signal.HBM_USED_BYTES, Pipeline.GMP, WORKLOAD) == []  # a GKE system metric


def test_adapter_rule_serves_the_name_the_hpa_uses() -> None:
    (values,) = companions(Signal.KV_CACHE_USAGE, Pipeline.PROMETHEUS_ADAPTER, WORKLOAD)
    rule = values["rules"]["custom"][0]
    assert rule["name"]["as"] == hpa_metric(Signal.KV_CACHE_USAGE, 800, Pipeline.PROMETHEUS_ADAPTER, WORKLOAD).name
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
    queries = adapter_queries(values)
    assert queries["vllm_kv_cache_usage_perc"].series == "vllm:kv_cache_usage_perc"
    (external,) = companions(Signal.HBM_USED_BYTES, Pipeline.PROMETHEUS_ADAPTER, WORKLOAD)
    assert adapter_queries(external)["tpu_memory_used_bytes"].aggregation == "sum"


SCALED_OBJECT = """\
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: vllm, namespace: llm}
spec:
  scaleTargetRef: {name: vllm}
  minReplicaCount: 2
  maxReplicaCount: 12
  advanced:
    horizontalPodAutoscalerConfig:
      behavior:
        scaleDown: {stabilizationWindowSeconds: 60}
  triggers:
  - type: prometheus
    metadata:
      serverAddress: http://prometheus.monitoring:9090
      query: sum(vllm:num_requests_waiting{namespace="llm"})
      threshold: "4.5"
  - type: prometheus
    metricType: Value
    metadata:
      serverAddress: http://prometheus.monitoring:9090
      query: avg(vllm:kv_cache_usage_perc)
      threshold: "0.8"
---
apiVersion: keda.sh/v1alpha1
kind: TriggerAuthentication
metadata: {name: unused}
spec: {podIdentity: {provider: gcp}}
"""


def test_a_scaled_object_reads_as_the_hpa_keda_creates() -> None:
    autoscaler = load_autoscaler(SCALED_OBJECT)
    spec = autoscaler.spec
    assert (spec.name, spec.min_replicas, spec.max_replicas) == ("keda-hpa-vllm", 2, 12)
    assert [(m.source, m.name, m.target.type, m.target.amount) for m in spec.metrics] == [
        (SourceType.EXTERNAL, "s0-prometheus", TargetType.AVERAGE_VALUE, 4500),
        (SourceType.EXTERNAL, "s1-prometheus", TargetType.VALUE, 800)]
    assert spec.behavior is not None and spec.behavior.scale_down.stabilization_window_seconds == 60
    assert [autoscaler.binding(m) for m in spec.metrics] == [Binding(Signal.QUEUE_SIZE, "sum"),
                                                             Binding(Signal.KV_CACHE_USAGE, "avg")]


def test_a_written_scaled_object_reads_back_to_the_same_hpa() -> None:
    spec, _ = hpa_from_scaled_object(yaml.safe_load(SCALED_OBJECT.split("---")[0]))
    workload = Workload("vllm", "llm", prometheus_url="http://prometheus.monitoring:9090")
    documents = scaled_object(spec, ["sum(vllm:num_requests_waiting)", "avg(vllm:kv_cache_usage_perc)"], workload)
    assert len(documents) == 1  # no TriggerAuthentication outside Google's managed Prometheus
    assert hpa_from_scaled_object(documents[0])[0] == spec


@pytest.mark.parametrize("edit, message", [
    (("minReplicaCount: 2", "minReplicaCount: 0"), "scale to zero"),
    (("type: prometheus\n    metadata", "type: kafka\n    metadata"), "only prometheus triggers"),
    (('threshold: "4.5"', 'threshold: "lots"'), "spec.triggers[0].metadata"),
    (("query: sum(", "query: rate("), "can be replayed"),
], ids=["scale-to-zero", "other-trigger", "bad-threshold", "unreadable-query"])
def test_scaled_object_errors_name_the_field(edit: tuple[str, str], message: str) -> None:
    with pytest.raises(ManifestError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_autoscaler(SCALED_OBJECT.replace(*edit, 1))


def test_a_file_with_two_autoscalers_or_a_stranger_is_refused() -> None:
    with pytest.raises(ManifestError, match="found 2"):
        load_autoscaler(SCALED_OBJECT.split("---")[0] + "---\n" + SCALED_OBJECT.split("---")[0])
    with pytest.raises(ManifestError, match="kind 'Deployment'"):
        load_autoscaler(SCALED_OBJECT + "---\nkind: Deployment\n")


@pytest.mark.parametrize("text, series, aggregation", [
    ("sum(vllm:num_requests_waiting)", "vllm:num_requests_waiting", "sum"),
    ('avg(jetstream_slots_used_percentage{namespace="x"})', "jetstream_slots_used_percentage", "avg"),
    ("max by (pod) (memory_used)", "memory_used", "max"),
    ("sum(vllm:num_requests_running) by (namespace)", "vllm:num_requests_running", "sum"),
    ("vllm:num_requests_waiting", "vllm:num_requests_waiting", None),
])
def test_promql_aggregations(text: str, series: str, aggregation: str | None) -> None:
    query = parse_query(text)
    assert (query.series, query.aggregation) == (series, aggregation)


def test_max_is_spotted_anywhere_in_a_query() -> None:
    assert aggregates_with_max("sum(rate(x[1m])) / max(y)")
    assert aggregates_with_max("max without (pod) (x)")
    assert not aggregates_with_max("sum(max_over_time(x[5m]))")
