"""What a user hands ``check``, ``decide`` and ``simulate``: the autoscaler and the objects beside it.

A file may hold, as YAML documents: exactly one autoscaler — an ``autoscaling/v2``
HorizontalPodAutoscaler, or a KEDA ScaledObject (read as the HPA KEDA creates, :mod:`autoscale.keda`) —
and any of: prometheus-adapter values or config (``rules``, or a ConfigMap holding ``config.yaml``), GMP
``PodMonitoring``s and KEDA ``TriggerAuthentication``s (accepted, nothing to replay). Queries found in KEDA
triggers and adapter rules bind the HPA's metric names to pool signals (:func:`autoscale.pipelines.binding`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from headroom.autoscale.errors import ManifestError
from headroom.autoscale.keda import hpa_from_scaled_object
from headroom.autoscale.manifest import API_VERSION, KIND, spec_from_dict
from headroom.autoscale.pipelines import Binding, adapter_queries, binding
from headroom.autoscale.promql import Query
from headroom.autoscale.spec import HpaSpec, MetricSpec

PASSIVE_KINDS = ("PodMonitoring", "ClusterPodMonitoring", "TriggerAuthentication", "ClusterTriggerAuthentication")


@dataclass(frozen=True)
class Autoscaler:
    """An HPA (as written, or as KEDA creates it) and the queries behind its metric names."""

    spec: HpaSpec
    kind: str = KIND
    queries: Mapping[str, Query] = field(default_factory=dict)
    document: Mapping[str, Any] = field(default_factory=dict)  # the HPA or ScaledObject as written

    def binding(self, metric: MetricSpec) -> Binding:
        return binding(metric, self.queries)


def load_autoscaler(text: str) -> Autoscaler:
    """The one autoscaler in ``text`` (see the module docstring); ManifestError names what is wrong."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise ManifestError(f"not valid YAML: {err}") from err
    autoscalers: list[tuple[HpaSpec, str, dict[str, Query], Any]] = []
    queries: dict[str, Query] = {}
    for index, document in enumerate(documents):
        if not isinstance(document, Mapping):
            raise ManifestError(f"document {index + 1}: expected a mapping, got {type(document).__name__}")
        kind = document.get("kind")
        if kind == KIND:
            autoscalers.append((spec_from_dict(document), KIND, {}, document))
        elif kind == "ScaledObject":
            spec, found = hpa_from_scaled_object(document)
            autoscalers.append((spec, kind, found, document))
        elif kind is None and "rules" in document:
            queries.update(adapter_queries(document))
        elif kind == "ConfigMap" and "config.yaml" in (document.get("data") or {}):
            queries.update(adapter_queries(yaml.safe_load(document["data"]["config.yaml"]) or {}))
        elif kind not in PASSIVE_KINDS:
            raise ManifestError(f"document {index + 1}: kind {kind!r} is neither an autoscaler "
                                f"({KIND} {API_VERSION}, KEDA ScaledObject) nor one that serves its metrics")
    if len(autoscalers) != 1:
        raise ManifestError(f"expected one HorizontalPodAutoscaler or ScaledObject, found {len(autoscalers)}")
    spec, kind, found, document = autoscalers[0]
    return Autoscaler(spec, kind, {**queries, **found}, document)


def bindings(autoscaler: Autoscaler) -> dict[str, Binding]:
    """Metric label → binding for every metric that reads a pool signal; SpecError for the first that
    none does (Resource metrics are left out: they are the pods' own resources)."""
    out = {}
    for metric in autoscaler.spec.metrics:
        if metric.source.value in ("Resource", "ContainerResource"):
            continue
        out[metric.label] = autoscaler.binding(metric)
    return out
