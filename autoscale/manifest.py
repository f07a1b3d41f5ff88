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
from enum import Enum
from typing import Any, TypeVar

import yaml

from headroom.autoscale.errors import ManifestError, SpecError
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

E = TypeVar("E", bound=Enum)


def parse_manifest(text: str) -> HpaSpec:
    """The HPA described by a YAML document (exactly one)."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise ManifestError(f"not valid YAML: {err}") from err
    if len(documents) != 1:
        raise ManifestError(f"expected one YAML document, found {len(documents)}")
    return spec_from_dict(documents[0])


def spec_from_dict(document: Any) -> HpaSpec:
    root = _mapping(document, "manifest")
    _only(root, {"apiVersion", "kind", "metadata", "spec", "status"}, "manifest")
    if root.get("apiVersion") != API_VERSION:
        raise ManifestError(f"apiVersion: expected {API_VERSION!r}, got {root.get('apiVersion')!r}")
    if root.get("kind") != KIND:
        raise ManifestError(f"kind: expected {KIND!r}, got {root.get('kind')!r}")
    metadata = _mapping(root.get("metadata", {}), "metadata")
    spec = _mapping(_required(root, "spec", "manifest"), "spec")
    _only(spec, {"scaleTargetRef", "minReplicas", "maxReplicas", "metrics", "behavior"}, "spec")
    ref = _mapping(_required(spec, "scaleTargetRef", "spec"), "spec.scaleTargetRef")
    _only(ref, {"apiVersion", "kind", "name"}, "spec.scaleTargetRef")
    metrics_raw = spec.get("metrics") or []
    if not isinstance(metrics_raw, list):
        raise ManifestError("spec.metrics: expected a list")
    metrics = tuple(_metric(m, f"spec.metrics[{i}]") for i, m in enumerate(metrics_raw)) or default_metrics()
    behavior_raw = spec.get("behavior")
    with _at("spec"):
        return HpaSpec(
            name=_string(metadata.get("name", "hpa"), "metadata.name"),
            namespace=_string(metadata.get("namespace", "default"), "metadata.namespace"),
            target_ref=ScaleTargetRef(kind=_string(_required(ref, "kind", "spec.scaleTargetRef"), "kind"),
                                      name=_string(_required(ref, "name", "spec.scaleTargetRef"), "name"),
                                      api_version=_string(ref.get("apiVersion", ""), "apiVersion")),
            min_replicas=_integer(spec.get("minReplicas", 1), "spec.minReplicas"),
            max_replicas=_integer(_required(spec, "maxReplicas", "spec"), "spec.maxReplicas"),
            metrics=metrics,
            behavior=None if behavior_raw is None else _behavior(behavior_raw, "spec.behavior"))


def emit_manifest(spec: HpaSpec) -> str:
    """YAML text of ``spec`` as a ready-to-apply manifest."""
    return yaml.safe_dump(spec_to_dict(spec), sort_keys=False)


def spec_to_dict(spec: HpaSpec) -> dict[str, Any]:
    ref = {"apiVersion": spec.target_ref.api_version, "kind": spec.target_ref.kind, "name": spec.target_ref.name}
    if not ref["apiVersion"]:
        del ref["apiVersion"]
    body: dict[str, Any] = {"scaleTargetRef": ref, "minReplicas": spec.min_replicas,
                            "maxReplicas": spec.max_replicas,
                            "metrics": [_metric_to_dict(m) for m in spec.metrics]}
    if spec.behavior is not None:
        body["behavior"] = {"scaleUp": _rules_to_dict(spec.behavior.scale_up),
                            "scaleDown": _rules_to_dict(spec.behavior.scale_down)}
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": spec.name, "namespace": spec.namespace}, "spec": body}


def _metric(raw: Any, path: str) -> MetricSpec:
    entry = _mapping(raw, path)
    source = _choice(SourceType, _required(entry, "type", path), f"{path}.type", "metric type")
    key = _SOURCE_KEYS[source]
    _only(entry, {"type", key}, path)
    body = _mapping(_required(entry, key, path), f"{path}.{key}")
    where = f"{path}.{key}"
    with _at(where):
        if source in (SourceType.RESOURCE, SourceType.CONTAINER_RESOURCE):
            allowed = {"name", "target"} | ({"container"} if source is SourceType.CONTAINER_RESOURCE else set())
            _only(body, allowed, where)
            return MetricSpec(source, _string(_required(body, "name", where), f"{where}.name"),
                              _target(_required(body, "target", where), f"{where}.target"),
                              container=body.get("container"))
        _only(body, {"metric", "target", "describedObject"} if source is SourceType.OBJECT else {"metric", "target"},
              where)
        name, selector = _metric_identifier(_required(body, "metric", where), f"{where}.metric")
        described = None
        if source is SourceType.OBJECT:
            obj = _mapping(_required(body, "describedObject", where), f"{where}.describedObject")
            _only(obj, {"apiVersion", "kind", "name"}, f"{where}.describedObject")
            described = ObjectReference(kind=_string(_required(obj, "kind", f"{where}.describedObject"), "kind"),
                                        name=_string(_required(obj, "name", f"{where}.describedObject"), "name"),
                                        api_version=_string(obj.get("apiVersion", ""), "apiVersion"))
        return MetricSpec(source, name, _target(_required(body, "target", where), f"{where}.target"),
                          selector=selector, described_object=described)


def _metric_identifier(raw: Any, path: str) -> tuple[str, Mapping[str, str] | None]:
    metric = _mapping(raw, path)
    _only(metric, {"name", "selector"}, path)
    selector = metric.get("selector")
    labels = None
    if selector is not None:
        selector = _mapping(selector, f"{path}.selector")
        if "matchExpressions" in selector:
            raise ManifestError(f"{path}.selector.matchExpressions: not supported, use matchLabels")
        _only(selector, {"matchLabels"}, f"{path}.selector")
        labels = {str(k): str(v) for k, v in _mapping(selector.get("matchLabels", {}),
                                                       f"{path}.selector.matchLabels").items()}
    return _string(_required(metric, "name", path), f"{path}.name"), labels


def _target(raw: Any, path: str) -> MetricTarget:
    target = _mapping(raw, path)
    kind = _choice(TargetType, _required(target, "type", path), f"{path}.type", "target type")
    key = _TARGET_KEYS[kind]
    _only(target, {"type", key}, path)
    raw_amount = _required(target, key, path)
    with _at(f"{path}.{key}"):
        amount = _integer(raw_amount, f"{path}.{key}") if kind is TargetType.UTILIZATION else to_milli(raw_amount)
        return MetricTarget(kind, amount)


def _behavior(raw: Any, path: str) -> Behavior:
    behavior = _mapping(raw, path)
    _only(behavior, {"scaleUp", "scaleDown"}, path)
    return Behavior(scale_up=_rules(behavior.get("scaleUp"), DEFAULT_SCALE_UP, f"{path}.scaleUp"),
                    scale_down=_rules(behavior.get("scaleDown"), DEFAULT_SCALE_DOWN, f"{path}.scaleDown"))


def _rules(raw: Any, default: ScalingRules, path: str) -> ScalingRules:
    if raw is None:
        return default
    rules = _mapping(raw, path)
    _only(rules, {"stabilizationWindowSeconds", "selectPolicy", "policies", "tolerance"}, path)
    policies = default.policies
    if "policies" in rules:
        if not isinstance(rules["policies"], list):
            raise ManifestError(f"{path}.policies: expected a list")
        policies = tuple(_policy(p, f"{path}.policies[{i}]") for i, p in enumerate(rules["policies"]))
    select = default.select_policy
    if rules.get("selectPolicy") is not None:
        select = _choice(SelectPolicy, rules["selectPolicy"], f"{path}.selectPolicy", "select policy")
    window = default.stabilization_window_seconds
    if rules.get("stabilizationWindowSeconds") is not None:
        window = _integer(rules["stabilizationWindowSeconds"], f"{path}.stabilizationWindowSeconds")
    tolerance = None
    if rules.get("tolerance") is not None:
        with _at(f"{path}.tolerance"):
            tolerance = float(to_fraction(rules["tolerance"]))
    with _at(path):
        return ScalingRules(policies, select, window, tolerance)


def _policy(raw: Any, path: str) -> ScalingPolicy:
    policy = _mapping(raw, path)
    _only(policy, {"type", "value", "periodSeconds"}, path)
    kind = _choice(PolicyType, _required(policy, "type", path), f"{path}.type", "policy type")
    with _at(path):
        return ScalingPolicy(kind, _integer(_required(policy, "value", path), f"{path}.value"),
                             _integer(_required(policy, "periodSeconds", path), f"{path}.periodSeconds"))


def _metric_to_dict(metric: MetricSpec) -> dict[str, Any]:
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


def _rules_to_dict(rules: ScalingRules) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if rules.stabilization_window_seconds is not None:
        out["stabilizationWindowSeconds"] = rules.stabilization_window_seconds
    out["selectPolicy"] = rules.select_policy.value
    out["policies"] = [{"type": p.type.value, "value": p.value, "periodSeconds": p.period_seconds}
                       for p in rules.policies]
    if rules.tolerance is not None:
        out["tolerance"] = format(Decimal(repr(rules.tolerance)).normalize(), "f")
    return out


class _at:
    """Re-raise a SpecError from inside a block as a ManifestError naming ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, err, tb) -> bool:
        if err is not None and isinstance(err, SpecError) and not isinstance(err, ManifestError):
            raise ManifestError(f"{self.path}: {err}") from err
        return False


def _choice(kind: type[E], value: Any, path: str, what: str) -> E:
    try:
        return kind(value)
    except ValueError:
        raise ManifestError(f"{path}: unknown {what} {value!r} (one of {', '.join(k.value for k in kind)})") from None


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ManifestError(f"{path}: expected a mapping, got {type(value).__name__}")
    return value


def _required(mapping: Mapping[str, Any], key: str, path: str) -> Any:
    if mapping.get(key) is None:
        raise ManifestError(f"{path}.{key}: required")
    return mapping[key]


def _only(mapping: Mapping[str, Any], allowed: set[str], path: str) -> None:
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise ManifestError(f"{path}: unknown field(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")


def _integer(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(f"{path}: expected an integer, got {value!r}")
    return value


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise ManifestError(f"{path}: expected a non-empty string, got {value!r}")
    return value
