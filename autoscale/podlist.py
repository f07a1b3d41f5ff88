"""The pods of one reconcile, for ``decide``: read from ``kubectl get pods -o yaml``, or described by counts.

From a file (a ``List`` of Pods, or Pod documents): the phase, the ``Ready`` condition and when it last
changed, ``startTime``, a ``deletionTimestamp`` (terminating), and each resource's requests summed
over the containers. Described: ``count`` Running pods started long ago, the last ``pending`` of them
Pending and the ``not_ready`` before those Running but not Ready, every one requesting ``requests``.
Times are seconds since the epoch.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import yaml

from headroom.autoscale.errors import ManifestError
from headroom.autoscale.fields import at_path, choice, mapping
from headroom.autoscale.pods import Pod, PodPhase
from headroom.autoscale.quantity import to_milli


def pods_from_yaml(text: str) -> tuple[Pod, ...]:
    """The pods in ``kubectl get pods -o yaml`` output (or Pod documents)."""
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise ManifestError(f"not valid YAML: {err}") from err
    items: list[Any] = []
    for document in documents:
        document = mapping(document, "document")
        items += (document.get("items") or []) if document.get("kind") == "List" else [document]
    pods = tuple(_pod(item, f"items[{i}]") for i, item in enumerate(items))
    if not pods:
        raise ManifestError("no Pod in the file")
    return pods


def described_pods(count: int, requests: Mapping[str, int], not_ready: int = 0, pending: int = 0) -> tuple[Pod, ...]:
    """``count`` pods ``pod-0``…; the last ``pending`` Pending, the ``not_ready`` before them not Ready."""
    if not_ready < 0 or pending < 0 or not_ready + pending > count:
        raise ManifestError(f"--not-ready {not_ready} and --pending {pending} must fit in {count} pods")
    pods = []
    for i in range(count):
        phase = PodPhase.PENDING if i >= count - pending else PodPhase.RUNNING
        ready = phase is PodPhase.RUNNING and i < count - pending - not_ready
        pods.append(Pod(f"pod-{i}", phase, ready=ready, requests=dict(requests)))
    return tuple(pods)


def _pod(raw: Any, path: str) -> Pod:
    pod = mapping(raw, path)
    if pod.get("kind", "Pod") != "Pod":
        raise ManifestError(f"{path}: expected a Pod, got {pod.get('kind')!r}")
    metadata = mapping(pod.get("metadata") or {}, f"{path}.metadata")
    status = mapping(pod.get("status") or {}, f"{path}.status")
    phase = choice(PodPhase, status.get("phase", "Pending"), f"{path}.status.phase", "pod phase")
    ready, changed = None, 0.0
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready":
            ready = condition.get("status") == "True"
            changed = _time(condition.get("lastTransitionTime"), f"{path}.status.conditions") or 0.0
    requests: dict[str, int] = {}
    for i, container in enumerate((pod.get("spec") or {}).get("containers") or []):
        for resource, amount in (((container.get("resources") or {}).get("requests")) or {}).items():
            with at_path(f"{path}.spec.containers[{i}].resources.requests.{resource}"):
                requests[resource] = requests.get(resource, 0) + to_milli(amount)
    return Pod(str(metadata.get("name", path)), phase, ready=ready,
               deleting=metadata.get("deletionTimestamp") is not None,
               started_at=_time(status.get("startTime"), f"{path}.status.startTime"),
               ready_changed_at=changed, requests=requests)


def _time(value: Any, path: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ManifestError(f"{path}: not an RFC 3339 time: {value!r}") from None
