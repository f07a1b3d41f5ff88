"""Checks of custom resources against the fields their CRDs require, and rendering the chart.

kubernetes-validate knows the built-in kinds only; for the custom ones this table holds, per kind, the
field paths their CRD marks required (``a.b[].c``: ``c`` of every item of list ``b``) and a few enums,
from the CRDs of the Gateway API Inference Extension (inference.networking.k8s.io/v1), the Gateway API,
GKE, Google Managed Prometheus, the Prometheus Operator and Strimzi (kafka.strimzi.io/v1).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "infra" / "helm" / "headroom"
KUBE_VERSION = "1.30.0"

REQUIRED: dict[tuple[str, str], list[str]] = {
    ("inference.networking.k8s.io/v1", "InferencePool"): [
        "spec.selector.matchLabels", "spec.targetPorts", "spec.targetPorts[].number", "spec.endpointPickerRef.name",
        "spec.endpointPickerRef.port.number"],  # port: required when kind is Service (a CEL rule)
    ("gateway.networking.k8s.io/v1", "Gateway"): [
        "spec.gatewayClassName", "spec.listeners", "spec.listeners[].name", "spec.listeners[].port",
        "spec.listeners[].protocol"],
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): ["spec.parentRefs[].name", "spec.rules[].backendRefs[].name"],
    ("networking.gke.io/v1", "HealthCheckPolicy"): ["spec.targetRef.group", "spec.targetRef.kind", "spec.targetRef.name",
                                                    "spec.default.config.type"],
    ("networking.gke.io/v1", "GCPBackendPolicy"): ["spec.targetRef.group", "spec.targetRef.kind", "spec.targetRef.name"],
    ("monitoring.googleapis.com/v1", "PodMonitoring"): ["spec.selector", "spec.endpoints", "spec.endpoints[].port"],
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ["spec.selector", "spec.endpoints[].port"],
    ("kafka.strimzi.io/v1", "Kafka"): ["spec.kafka.listeners", "spec.kafka.listeners[].name",
                                       "spec.kafka.listeners[].port", "spec.kafka.listeners[].type",
                                       "spec.kafka.listeners[].tls"],
    ("kafka.strimzi.io/v1", "KafkaNodePool"): ["metadata.labels.strimzi.io/cluster", "spec.replicas", "spec.roles",
                                               "spec.storage.type", "spec.storage.volumes[].id",
                                               "spec.storage.volumes[].type"],
    ("kafka.strimzi.io/v1", "KafkaTopic"): ["metadata.labels.strimzi.io/cluster", "spec.partitions", "spec.replicas"],
    ("kafka.strimzi.io/v1", "KafkaUser"): ["metadata.labels.strimzi.io/cluster", "spec.authentication.type",
                                           "spec.authorization.type", "spec.authorization.acls",
                                           "spec.authorization.acls[].resource.type",
                                           "spec.authorization.acls[].operations"],
}

ENUMS: dict[tuple[str, str], dict[str, set]] = {
    ("inference.networking.k8s.io/v1", "InferencePool"): {
        "spec.endpointPickerRef.failureMode": {"FailOpen", "FailClose"},
        "spec.endpointPickerRef.kind": {"Service"}, "spec.appProtocol": {"http", "kubernetes.io/h2c"}},
    ("kafka.strimzi.io/v1", "KafkaUser"): {
        "spec.authentication.type": {"tls", "tls-external", "scram-sha-512"},
        "spec.authorization.acls[].resource.type": {"topic", "group", "cluster", "transactionalId"},
        "spec.authorization.acls[].resource.patternType": {"literal", "prefix"},
        "spec.authorization.acls[].operations[]": {"Read", "Write", "Create", "Delete", "Alter", "Describe",
                                                   "ClusterAction", "AlterConfigs", "DescribeConfigs",
                                                   "IdempotentWrite", "All"}},
    ("kafka.strimzi.io/v1", "KafkaNodePool"): {"spec.roles[]": {"controller", "broker"}},
}


def values_at(obj: Any, path: str) -> list[Any]:
    """Every value at ``path``; a missing field yields nothing. After ``labels.`` the rest is one label key."""
    found = [obj]
    for part in _parts(path):
        each = part.endswith("[]")
        key = part[:-2] if each else part
        step = []
        for item in found:
            if key and isinstance(item, dict) and key in item:
                step.append(item[key])
            elif not key:
                step.append(item)
        found = [x for v in step for x in v] if each else step
    return found


def _parts(path: str) -> list[str]:
    parts = path.split(".")
    if "labels" in parts:  # a label key such as strimzi.io/cluster holds dots
        at = parts.index("labels") + 1
        parts = [*parts[:at], ".".join(parts[at:])]
    return parts


def problems(obj: dict) -> list[str]:
    """What ``obj`` lacks or holds wrongly by the table above ([] for kinds the table has no row for)."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    name = f"{key[1]} {obj.get('metadata', {}).get('name')}"
    found = []
    for path in REQUIRED.get(key, []):
        hits = values_at(obj, path)
        if not hits or any(v in (None, "", [], {}) for v in hits):
            found.append(f"{name}: {path} is required")
    for path, allowed in ENUMS.get(key, {}).items():
        found += [f"{name}: {path}={v!r} is not one of {sorted(allowed)}" for v in values_at(obj, path) if v not in allowed]
    return found


def render(helm: Path, *args: str, release: str = "hr", namespace: str = "llm") -> list[dict]:
    """The chart's objects for ``helm template`` with ``args`` (--set, -f, --set-file ...)."""
    done = subprocess.run([str(helm), "template", release, str(CHART), "--namespace", namespace,
                           "--kube-version", KUBE_VERSION, *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RenderError(done.stderr.strip())
    return [obj for obj in yaml.safe_load_all(done.stdout) if obj]


class RenderError(RuntimeError):
    """``helm template`` failed; the message is helm's."""
