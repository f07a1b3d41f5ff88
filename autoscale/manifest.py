"""Read and write ``autoscaling/v2`` HorizontalPodAutoscaler manifests.

:func:`parse_manifest` turns YAML text into an :class:`~autoscale.spec.HpaSpec`, applying Kubernetes'
defaults (minReplicas 1, CPU 80 % when ``metrics`` is empty, every unset ``behavior`` field). Unknown
fields are rejected, and every error names the field path (``spec.metrics[0].pods.target``).
``status`` is ignored, so ``kubectl get hpa -o yaml`` output reads too. Label selectors support
``matchLabels`` only. :func:`emit_manifest` writes a spec back, with ``behavior`` fully spelled out.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import yaml

from headroom.autoscale.errors import ManifestError
from headroom.autoscale.fields import at_path, choice, integer, mapping, only, required, string
from headroom.autoscale.quantity import format_milli, to_fraction, to_milli
from headroom.autoscale.spec import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    Behavior,
    HpaSpec,
    MetricSpec,
    MetricTarget,
    ObjectReference,
    PolicyType,
    ScaleTargetRef,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
    SourceType,
    TargetType,
    default_metrics,
)

API_VERSION = "autoscaling/v2"
KIND = "HorizontalPodAutoscaler"
_SOURCE_KEYS = {SourceType.RESOURCE: "resource", SourceType.CONTAINER_RESOURCE: "containerResource",
                SourceType.PODS: "pods", SourceType.OBJECT: "object", SourceType.EXTERNAL: "external"}
_TARGET_KEYS = {TargetType.UTILIZATION: "averageUtilization", TargetType.VALUE: "value",
                TargetType.AVERAGE_VALUE: "averageValue"}


def parse_manifest(text: str) -> HpaSpec:
    """The HPA described by a YAML document (exactly one)."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise ManifestError(f"not valid YAML: {err}") from err
    if len(documents) != 1:
        raise ManifestError(f"expected one YAML document, found {len(documents)}")
    return spec_from_dict(documents[0])


INITIAL_REPLICAS = "autoscaling.headroom.dev/initial-replicas"  # annotation: the replicas serving when it takes over


def initial_replicas(metadata: Any) -> int | None:
    """The :data:`INITIAL_REPLICAS` annotation of a manifest's metadata, if it has one."""
    annotations = mapping(metadata.get("annotations") or {}, "metadata.annotations")
    raw = annotations.get(INITIAL_REPLICAS)
    return None if raw is None else integer(int(raw) if str(raw).isdigit() else raw,
                                            f"metadata.annotations[{INITIAL_REPLICAS}]")


def spec_from_dict(document: Any) -> HpaSpec:
    root = mapping(document, "manifest")
    only(root, {"apiVersion", "kind", "metadata", "spec", "status"}, "manifest")
    if root.get("apiVersion") != API_VERSION:
        raise ManifestError(f"apiVersion: expected {API_VERSION!r}, got {root.get('apiVersion')!r}")
    if root.get("kind") != KIND:
        raise ManifestError(f"kind: expected {KIND!r}, got {root.get('kind')!r}")
    metadata = mapping(root.get("metadata", {}), "metadata")
    spec = mapping(required(root, "spec", "manifest"), "spec")
    only(spec, {"scaleTargetRef", "minReplicas", "maxReplicas", "metrics", "behavior"}, "spec")
    ref = mapping(required(spec, "scaleTargetRef", "spec"), "spec.scaleTargetRef")
    only(ref, {"apiVersion", "kind", "name"}, "spec.scaleTargetRef")
    metrics_raw = spec.get("metrics") or []
    if not isinstance(metrics_raw, list):
        raise ManifestError("spec.metrics: expected a list")
    metrics = tuple(_metric(m, f"spec.metrics[{i}]") for i, m in enumerate(metrics_raw)) or default_metrics()
    behavior_raw = spec.get("behavior")
    with at_path("spec"):
        return HpaSpec(
            name=string(metadata.get("name", "hpa"), "metadata.name"),
            namespace=string(metadata.get("namespace", "default"), "metadata.namespace"),
            target_ref=ScaleTargetRef(kind=string(required(ref, "kind", "spec.scaleTargetRef"), "kind"),
                                      name=string(required(ref, "name", "spec.scaleTargetRef"), "name"),
                                      api_version=_optional_string(ref, "apiVersion", "spec.scaleTargetRef")),
            min_replicas=integer(spec.get("minReplicas", 1), "spec.minReplicas"),
            max_replicas=integer(required(spec, "maxReplicas", "spec"), "spec.maxReplicas"),
            metrics=metrics,
            behavior=None if behavior_raw is None else behavior_from_dict(behavior_raw, "spec.behavior"),
            initial_replicas=initial_replicas(metadata))


def emit_manifest(spec: HpaSpec) -> str:
    """YAML text of ``spec`` as a ready-to-apply manifest."""
    text: str = yaml.safe_dump(spec_to_dict(spec), sort_keys=False)
    return text


def spec_to_dict(spec: HpaSpec) -> dict[str, Any]:
    ref = {"apiVersion": spec.target_ref.api_version, "kind": spec.target_ref.kind, "name": spec.target_ref.name}
    if not ref["apiVersion"]:
        del ref["apiVersion"]
    body: dict[str, Any] = {"scaleTargetRef": ref, "minReplicas": spec.min_replicas,
                            "maxReplicas": spec.max_replicas,
                            "metrics": [metric_to_dict(m) for m in spec.metrics]}
    if spec.behavior is not None:
        body["behavior"] = {"scaleUp": rules_to_dict(spec.behavior.scale_up),
                            "scaleDown": rules_to_dict(spec.behavior.scale_down)}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata_of(spec), "spec": body}


def metadata_of(spec: HpaSpec) -> dict[str, Any]:
    """Name, namespace, and the :data:`INITIAL_REPLICAS` annotation when the spec carries one."""
    metadata: dict[str, Any] = {"name": spec.name, "namespace": spec.namespace}
    if spec.initial_replicas is not None:
        metadata["annotations"] = {INITIAL_REPLICAS: str(spec.initial_replicas)}
    return metadata


def _metric(raw: Any, path: str) -> MetricSpec:
    entry = mapping(raw, path)
    source = choice(SourceType, required(entry, "type", path), f"{path}.type", "metric type")
    key = _SOURCE_KEYS[source]
    only(entry, {"type", key}, path)
    body = mapping(required(entry, key, path), f"{path}.{key}")
    where = f"{path}.{key}"
    with at_path(where):
        if source in (SourceType.RESOURCE, SourceType.CONTAINER_RESOURCE):
            allowed = {"name", "target"} | ({"container"} if source is SourceType.CONTAINER_RESOURCE else set())
            only(body, allowed, where)
            return MetricSpec(source, string(required(body, "name", where), f"{where}.name"),
                              _target(required(body, "target", where), f"{where}.target"),
                              container=body.get("container"))
        only(body, {"metric", "target", "describedObject"} if source is SourceType.OBJECT else {"metric", "target"},
              where)
        name, selector = _metric_identifier(required(body, "metric", where), f"{where}.metric")
        described = None
        if source is SourceType.OBJECT:
            obj = mapping(required(body, "describedObject", where), f"{where}.describedObject")
            only(obj, {"apiVersion", "kind", "name"}, f"{where}.describedObject")
            described = ObjectReference(kind=string(required(obj, "kind", f"{where}.describedObject"), "kind"),
                                        name=string(required(obj, "name", f"{where}.describedObject"), "name"),
                                        api_version=_optional_string(obj, "apiVersion", f"{where}.describedObject"))
        return MetricSpec(source, name, _target(required(body, "target", where), f"{where}.target"),
                          selector=selector, described_object=described)


def _metric_identifier(raw: Any, path: str) -> tuple[str, Mapping[str, str] | None]:
    metric = mapping(raw, path)
    only(metric, {"name", "selector"}, path)
    selector = metric.get("selector")
    labels = None
    if selector is not None:
        selector = mapping(selector, f"{path}.selector")
        if "matchExpressions" in selector:
            raise ManifestError(f"{path}.selector.matchExpressions: not supported, use matchLabels")
        only(selector, {"matchLabels"}, f"{path}.selector")
        labels = {str(k): str(v) for k, v in mapping(selector.get("matchLabels", {}),
                                                       f"{path}.selector.matchLabels").items()}
    return string(required(metric, "name", path), f"{path}.name"), labels


def _target(raw: Any, path: str) -> MetricTarget:
    target = mapping(raw, path)
    kind = choice(TargetType, required(target, "type", path), f"{path}.type", "target type")
    key = _TARGET_KEYS[kind]
    only(target, {"type", key}, path)
    raw_amount = required(target, key, path)
    with at_path(f"{path}.{key}"):
        amount = integer(raw_amount, f"{path}.{key}") if kind is TargetType.UTILIZATION else to_milli(raw_amount)
        return MetricTarget(kind, amount)


def behavior_from_dict(raw: Any, path: str) -> Behavior:
    behavior = mapping(raw, path)
    only(behavior, {"scaleUp", "scaleDown"}, path)
    return Behavior(scale_up=_rules(behavior.get("scaleUp"), DEFAULT_SCALE_UP, f"{path}.scaleUp"),
                    scale_down=_rules(behavior.get("scaleDown"), DEFAULT_SCALE_DOWN, f"{path}.scaleDown"))


def _rules(raw: Any, default: ScalingRules, path: str) -> ScalingRules:
    if raw is None:
        return default
    rules = mapping(raw, path)
    only(rules, {"stabilizationWindowSeconds", "selectPolicy", "policies", "tolerance"}, path)
    policies = default.policies
    if "policies" in rules:
        if not isinstance(rules["policies"], list):
            raise ManifestError(f"{path}.policies: expected a list")
        policies = tuple(_policy(p, f"{path}.policies[{i}]") for i, p in enumerate(rules["policies"]))
    select = default.select_policy
    if rules.get("selectPolicy") is not None:
        select = choice(SelectPolicy, rules["selectPolicy"], f"{path}.selectPolicy", "select policy")
    window = default.stabilization_window_seconds
    if rules.get("stabilizationWindowSeconds") is not None:
        window = integer(rules["stabilizationWindowSeconds"], f"{path}.stabilizationWindowSeconds")
    tolerance = None
    if rules.get("tolerance") is not None:
        with at_path(f"{path}.tolerance"):
            tolerance = float(to_fraction(rules["tolerance"]))
    with at_path(path):
        return ScalingRules(policies, select, window, tolerance)


def _policy(raw: Any, path: str) -> ScalingPolicy:
    policy = mapping(raw, path)
    only(policy, {"type", "value", "periodSeconds"}, path)
    kind = choice(PolicyType, required(policy, "type", path), f"{path}.type", "policy type")
    with at_path(path):
        return ScalingPolicy(kind, integer(required(policy, "value", path), f"{path}.value"),
                             integer(required(policy, "periodSeconds", path), f"{path}.periodSeconds"))


def metric_to_dict(metric: MetricSpec) -> dict[str, Any]:
    key = _TARGET_KEYS[metric.target.type]
    amount = metric.target.amount
    target = {"type": metric.target.type.value,
              key: amount if metric.target.type is TargetType.UTILIZATION else format_milli(amount)}
    if metric.source in (SourceType.RESOURCE, SourceType.CONTAINER_RESOURCE):
        body: dict[str, Any] = {"name": metric.name}
        if metric.container:
            body["container"] = metric.container
    else:
        identifier: dict[str, Any] = {"name": metric.name}
        if metric.selector:
            identifier["selector"] = {"matchLabels": dict(metric.selector)}
        body = {"metric": identifier}
        if metric.described_object is not None:
            obj = metric.described_object
            body["describedObject"] = {k: v for k, v in (("apiVersion", obj.api_version), ("kind", obj.kind),
                                                         ("name", obj.name)) if v}
    body["target"] = target
    return {"type": metric.source.value, _SOURCE_KEYS[metric.source]: body}


def rules_to_dict(rules: ScalingRules) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if rules.stabilization_window_seconds is not None:
        out["stabilizationWindowSeconds"] = rules.stabilization_window_seconds
    out["selectPolicy"] = rules.select_policy.value
    out["policies"] = [{"type": p.type.value, "value": p.value, "periodSeconds": p.period_seconds}
                       for p in rules.policies]
    if rules.tolerance is not None:
        out["tolerance"] = format(Decimal(repr(rules.tolerance)).normalize(), "f")
    return out


def _optional_string(fields: Mapping[str, Any], key: str, path: str) -> str:
    return string(fields[key], f"{path}.{key}") if key in fields else ""
