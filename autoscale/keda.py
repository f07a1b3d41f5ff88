"""KEDA ``ScaledObject``s with Prometheus triggers: the HPA KEDA creates from one, and one from an HPA.

KEDA turns trigger ``i`` of a ScaledObject into an ``External`` metric named ``s<i>-prometheus``
(selector ``scaledobject.keda.sh/name: <name>``) on an HPA named ``keda-hpa-<name>``: the metric's
value is the query's single result, its target the trigger's ``threshold`` (``metricType`` AverageValue
by default, or Value). ``minReplicaCount`` and ``maxReplicaCount`` (defaults 0 and 100) become the
HPA's bounds and ``advanced.horizontalPodAutoscalerConfig.behavior`` its behavior. Only Prometheus
triggers are read; scale to zero (``minReplicaCount: 0``) is KEDA's, not the HPA's, and is refused.
"""

from __future__ import annotations

from typing import Any

from headroom.autoscale.errors import ManifestError
from headroom.autoscale.fields import at_path, choice, integer, mapping, only, required, string
from headroom.autoscale.manifest import behavior_from_dict, initial_replicas, metadata_of, rules_to_dict
from headroom.autoscale.pipelines import GMP_QUERY_URL, KEDA_SCALED_OBJECT_LABEL, Workload
from headroom.autoscale.promql import Query, parse_query
from headroom.autoscale.quantity import format_decimal, to_milli
from headroom.autoscale.spec import HpaSpec, MetricSpec, MetricTarget, ScaleTargetRef, SourceType, TargetType

API_VERSION = "keda.sh/v1alpha1"
KIND = "ScaledObject"
_TRIGGER_METADATA = {"serverAddress", "query", "threshold", "activationThreshold", "namespace", "customHeaders",
                     "ignoreNullValues", "queryParameters", "unsafeSsl", "timeout", "authModes", "metricName"}


def hpa_from_scaled_object(document: Any) -> tuple[HpaSpec, dict[str, Query]]:
    """The HPA KEDA would create from ``document``, and each External metric's query."""
    root = mapping(document, "ScaledObject")
    only(root, {"apiVersion", "kind", "metadata", "spec", "status"}, "ScaledObject")
    metadata = mapping(root.get("metadata", {}), "metadata")
    name = string(required(metadata, "name", "metadata"), "metadata.name")
    spec = mapping(required(root, "spec", "ScaledObject"), "spec")
    only(spec, {"scaleTargetRef", "minReplicaCount", "maxReplicaCount", "triggers", "advanced", "pollingInterval",
                "cooldownPeriod", "idleReplicaCount", "fallback", "initialCooldownPeriod"}, "spec")
    ref = mapping(required(spec, "scaleTargetRef", "spec"), "spec.scaleTargetRef")
    only(ref, {"apiVersion", "kind", "name", "envSourceContainerName"}, "spec.scaleTargetRef")
    minimum = integer(spec.get("minReplicaCount", 0), "spec.minReplicaCount")
    if minimum < 1:
        raise ManifestError("spec.minReplicaCount: scale to zero is KEDA's activation, not the HPA's; "
                            "set 1 or more to simulate the HPA")
    triggers = required(spec, "triggers", "spec")
    if not isinstance(triggers, list) or not triggers:
        raise ManifestError("spec.triggers: expected a non-empty list")
    metrics, queries = [], {}
    for index, raw in enumerate(triggers):
        metric, query = _trigger(raw, index, name, f"spec.triggers[{index}]")
        metrics.append(metric)
        queries[metric.name] = query
    advanced = mapping(spec.get("advanced") or {}, "spec.advanced")
    hpa_config = mapping(advanced.get("horizontalPodAutoscalerConfig") or {},
                         "spec.advanced.horizontalPodAutoscalerConfig")
    behavior_raw = hpa_config.get("behavior")
    with at_path("spec"):
        hpa = HpaSpec(name=f"keda-hpa-{name}", namespace=metadata.get("namespace", "default"),
                      target_ref=ScaleTargetRef(kind=ref.get("kind", "Deployment"),
                                                name=string(required(ref, "name", "spec.scaleTargetRef"), "name"),
                                                api_version=ref.get("apiVersion", "apps/v1")),
                      min_replicas=minimum,
                      max_replicas=integer(spec.get("maxReplicaCount", 100), "spec.maxReplicaCount"),
                      metrics=tuple(metrics),
                      behavior=None if behavior_raw is None else behavior_from_dict(
                          behavior_raw, "spec.advanced.horizontalPodAutoscalerConfig.behavior"),
                      initial_replicas=initial_replicas(metadata))
    return hpa, queries


def _trigger(raw: Any, index: int, name: str, path: str) -> tuple[MetricSpec, Query]:
    trigger = mapping(raw, path)
    only(trigger, {"type", "metadata", "metricType", "name", "authenticationRef", "useCachedMetrics"}, path)
    if trigger.get("type") != "prometheus":
        raise ManifestError(f"{path}.type: only prometheus triggers can be simulated, got {trigger.get('type')!r}")
    meta = mapping(required(trigger, "metadata", path), f"{path}.metadata")
    only(meta, _TRIGGER_METADATA, f"{path}.metadata")
    kind = choice(TargetType, trigger.get("metricType", "AverageValue"), f"{path}.metricType", "metric type")
    if kind is TargetType.UTILIZATION:
        raise ManifestError(f"{path}.metricType: a Prometheus trigger takes AverageValue or Value")
    with at_path(f"{path}.metadata"):
        query = parse_query(string(required(meta, "query", f"{path}.metadata"), "query"))
        target = MetricTarget(kind, to_milli(str(required(meta, "threshold", f"{path}.metadata"))))
        metric = MetricSpec(SourceType.EXTERNAL, f"s{index}-prometheus", target,
                            selector={KEDA_SCALED_OBJECT_LABEL: name})
    return metric, query


def scaled_object(spec: HpaSpec, queries: list[str], workload: Workload) -> list[dict[str, Any]]:
    """A ScaledObject whose generated HPA is ``spec`` (one Prometheus trigger per metric, with its query
    from ``queries``), and the TriggerAuthentication it needs when asking Google's managed Prometheus."""
    gmp = workload.prometheus_url.startswith(GMP_QUERY_URL.split("/projects/")[0])
    triggers = []
    for metric, query in zip(spec.metrics, queries, strict=True):
        trigger: dict[str, Any] = {"type": "prometheus", "metricType": metric.target.type.value,
                                   "metadata": {"serverAddress": workload.prometheus_url, "query": query,
                                                "threshold": format_decimal(metric.target.amount)}}
        if gmp:
            trigger["authenticationRef"] = {"name": f"{workload.name}-gmp"}
        triggers.append(trigger)
    body: dict[str, Any] = {"scaleTargetRef": {"apiVersion": spec.target_ref.api_version,
                                               "kind": spec.target_ref.kind, "name": spec.target_ref.name},
                            "minReplicaCount": spec.min_replicas, "maxReplicaCount": spec.max_replicas,
                            "triggers": triggers}
    if spec.behavior is not None:
        body["advanced"] = {"horizontalPodAutoscalerConfig": {"behavior": {
            "scaleUp": rules_to_dict(spec.behavior.scale_up), "scaleDown": rules_to_dict(spec.behavior.scale_down)}}}
    metadata = {**metadata_of(spec), "name": workload.name, "namespace": workload.namespace}
    documents = [{"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": body}]
    if gmp:  # KEDA reads Google's managed Prometheus with the operator's workload identity
        documents.append({"apiVersion": API_VERSION, "kind": "TriggerAuthentication",
                          "metadata": {"name": f"{workload.name}-gmp", "namespace": workload.namespace},
                          "spec": {"podIdentity": {"provider": "gcp"}}})
    return documents
