"""The pool's model-server pods, watched through the Kubernetes API: the server list of a router that is a
Gateway's endpoint picker.

A pod is a server while it matches the selector, has an IP, is Ready and is not being deleted. Its id is
the pod name (and its namespace and pod are the pod's), its address ``podIP:port`` (the InferencePool's target port), its metrics URL uses the
container port named ``metricsPort`` in its spec (or that number; the target port when neither is
there), and its pool key is the value of its ``poolLabel`` label (``default`` without one).

:class:`PodWatcher` lists the pods, then watches them from that list's resource version on a thread of
its own (the official client is synchronous); :meth:`PodWatcher.refresh` hands a changed server list to
the router's loop, as :class:`~router.state.servers.ServerFile` does for a file. An expired resource
version (HTTP 410) means a fresh list; any other error keeps the last server list, is kept in
``last_error`` and is retried after ``retry_s``. A watch that has been idle for ``idle_s`` is resumed
from its resource version, which also bounds how long :meth:`PodWatcher.stop` waits.

Config (the ``pods:`` key of the router config)::

    pods: {namespace: llm, selector: {app: vllm-llama3}, port: 8000, metricsPort: metrics, poolLabel: pool}

It needs ``get``, ``list`` and ``watch`` on ``pods`` in that namespace, nothing else.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from headroom.router.errors import ConfigError
from headroom.router.state.servers import ServerSpec

log = logging.getLogger(__name__)

_KEYS = {"namespace", "selector", "port", "metricsPort", "poolLabel"}


@dataclass(frozen=True)
class PodSelector:
    namespace: str
    match_labels: dict[str, str] = field(default_factory=dict)
    port: int = 8000
    metrics_port: str | int = "metrics"
    pool_label: str = ""

    @property
    def label_selector(self) -> str:
        return ",".join(f"{key}={value}" for key, value in sorted(self.match_labels.items()))


def parse_pods(raw: Any) -> PodSelector:
    """The ``pods:`` config, with precise errors."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"pods must be a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ConfigError(f"pods: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    namespace, selector = raw.get("namespace"), raw.get("selector")
    if not isinstance(namespace, str) or not namespace:
        raise ConfigError(f"pods: namespace must be a namespace name, got {namespace!r}")
    if not isinstance(selector, Mapping) or not selector or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in selector.items()):
        raise ConfigError(f"pods: selector must map label names to values (at least one), got {selector!r}")
    port, metrics_port = raw.get("port", 8000), raw.get("metricsPort", "metrics")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ConfigError(f"pods: port must be a port number, got {port!r}")
    if not isinstance(metrics_port, (str, int)) or isinstance(metrics_port, bool):
        raise ConfigError(f"pods: metricsPort must be a container port name or number, got {metrics_port!r}")
    pool_label = raw.get("poolLabel", "")
    if not isinstance(pool_label, str):
        raise ConfigError(f"pods: poolLabel must be a label name, got {pool_label!r}")
    return PodSelector(namespace, dict(selector), port, metrics_port, pool_label)


def server_of(pod: Any, selector: PodSelector) -> ServerSpec | None:
    """The server a pod (a ``kubernetes.client.V1Pod``) is, or None while it must not take requests."""
    status, meta = pod.status, pod.metadata
    if meta.deletion_timestamp is not None or status is None or not status.pod_ip:
        return None
    if not any(c.type == "Ready" and c.status == "True" for c in status.conditions or ()):
        return None
    metrics_port = selector.port
    if isinstance(selector.metrics_port, int):
        metrics_port = selector.metrics_port
    else:
        named = [p.container_port for c in pod.spec.containers for p in c.ports or () if p.name == selector.metrics_port]
        metrics_port = named[0] if named else selector.port
    host = f"[{status.pod_ip}]" if ":" in status.pod_ip else status.pod_ip
    pool = (meta.labels or {}).get(selector.pool_label, "default") if selector.pool_label else "default"
    return ServerSpec(meta.name, f"{host}:{selector.port}", pool, f"http://{host}:{metrics_port}/metrics",
                      namespace=selector.namespace, pod=meta.name)


class PodWatcher:
    """Keeps :attr:`servers` equal to the ready pods of the selector; see the module docstring."""

    def __init__(self, selector: PodSelector, api: Any = None, *, retry_s: float = 1.0, idle_s: float = 10.0):
        """``api``: a ``kubernetes.client.CoreV1Api``; by default from the in-cluster service account, else
        from the kubeconfig (``KUBECONFIG`` or ``~/.kube/config``)."""
        self.selector = selector
        self.api = api
        self.retry_s = retry_s
        self.idle_s = idle_s
        self.servers: tuple[ServerSpec, ...] = ()
        self.last_error: str | None = None
        self._pods: dict[str, ServerSpec] = {}
        self._lock = threading.Lock()
        self._changed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> PodWatcher:
        if self.api is None:
            self.api = _core_api()
        self._thread = threading.Thread(target=self._run, name="pod-watcher", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 1.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def refresh(self) -> bool:
        """True once after each change of the server list (then read :attr:`servers`)."""
        with self._lock:
            changed, self._changed = self._changed, False
            return changed

    def _run(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError, ReadTimeoutError

        version = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._list()
                for event in watch.Watch().stream(
                        self.api.list_namespaced_pod, self.selector.namespace, resource_version=version,
                        label_selector=self.selector.label_selector, allow_watch_bookmarks=True,
                        timeout_seconds=300, _request_timeout=(5.0, self.idle_s)):
                    pod = event["object"]
                    version = pod.metadata.resource_version or version
                    if event["type"] != "BOOKMARK":
                        self._apply(pod.metadata.name, None if event["type"] == "DELETED" else pod)
                    if self._stop.is_set():
                        return
            except ApiException as err:
                version = None  # 410: the resource version expired; anything else: start over too
                if err.status != 410:
                    self._failed(f"Kubernetes API: {err.status} {err.reason}")
            except ReadTimeoutError:
                continue  # an idle watch (or a slow list): resume from the resource version
            except HTTPError as err:
                version = None
                self._failed(f"Kubernetes API: {type(err).__name__}: {err}")
            except Exception as err:  # the watcher must outlive any one failure
                version = None
                self._failed(f"pod watch failed: {type(err).__name__}: {err}")

    def _list(self) -> str:
        listed = self.api.list_namespaced_pod(self.selector.namespace, label_selector=self.selector.label_selector,
                                              _request_timeout=(5.0, 30.0))
        pods = {}
        for pod in listed.items:
            spec = server_of(pod, self.selector)
            if spec is not None:
                pods[pod.metadata.name] = spec
        with self._lock:
            self._pods = pods
            self._publish()
            self.last_error = None
        return str(listed.metadata.resource_version)

    def _apply(self, name: str, pod: Any) -> None:
        spec = None if pod is None else server_of(pod, self.selector)
        with self._lock:
            if self._pods.get(name) == spec:
                return
            if spec is None:
                self._pods.pop(name, None)
            else:
                self._pods[name] = spec
            self._publish()

    def _publish(self) -> None:
        servers = tuple(spec for _, spec in sorted(self._pods.items()))
        if servers != self.servers:
            self.servers = servers
            self._changed = True
            log.info("pods of %s: %d ready", self.selector.label_selector, len(servers))

    def _failed(self, error: str) -> None:
        self.last_error = error
        log.warning("%s; keeping %d servers, retrying in %.0f s", error, len(self.servers), self.retry_s)
        self._stop.wait(self.retry_s)


def configure_kubernetes(purpose: str) -> None:
    """Point the Kubernetes client at the cluster: in-cluster, else the kubeconfig (``KUBECONFIG`` or
    ``~/.kube/config``); :class:`ConfigError` naming ``purpose`` when neither is there."""
    from kubernetes import config
    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:  # the client's own KUBECONFIG, read now rather than when the client was imported
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG", config.KUBE_CONFIG_DEFAULT_LOCATION))
        except (config.ConfigException, OSError) as err:
            raise ConfigError(f"{purpose}: no access to the Kubernetes API: not in a cluster, and no kubeconfig "
                              f"(KUBECONFIG or ~/.kube/config): {err}") from err


def _core_api() -> Any:
    from kubernetes import client
    configure_kubernetes("pods")
    return client.CoreV1Api()
