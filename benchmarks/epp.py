"""GIE's endpoint picker (the EPP, v1.5.0, built by ``infra/build-tool epp``) over a simulated pool, for the
benchmarks that measure the router against it (``headroom bench ext-proc --versus-epp``).

:func:`sim_fleet` starts one ``headroom sim serve`` per server, each on a loopback address of its own
(127.0.0.11, 127.0.0.12, …) and one shared port, as the Pods of an ``InferencePool`` serve its one target port.
:func:`epp_pool` writes what a cluster would hold into a real API server (:mod:`benchmarks.kube_api`): GIE's CRDs,
the ``InferencePool`` and a Ready Pod per address (no kubelet runs: their status is written by hand). :func:`start_epp`
then runs the EPP on it, plaintext on free ports, with one of :data:`CONFIGS`: its built-in default (queue 2,
KV-cache utilisation 2, prefix-cache 3, max-score picker) or the same three scorers at weight 1 with the
weighted-random picker (the configuration matched to headroom's heuristic profile). Both scrape each server's
``/metrics`` every 50 ms.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from headroom.benchmarks.kube_api import KubeApi, build_tool, kube_api
from headroom.benchmarks.live import Process
from headroom.ports import free_port

if TYPE_CHECKING:
    from kubernetes.client import V1CustomResourceDefinition

NAMESPACE, POOL = "default", "sim-pool"
GROUP, VERSION = "inference.networking.k8s.io", "v1"
LABELS = {"app": "headroom-sim"}
FIRST_ADDRESS = 11  # 127.0.0.11 is the first server's address
START_S = 600.0  # for a fleet of processes to start, each importing its libraries, on a loaded host
CONFIGS: dict[str, str | None] = {
    "default": None,  # the EPP's built-in configuration
    "matched": yaml.safe_dump({
        "apiVersion": "inference.networking.x-k8s.io/v1alpha1", "kind": "EndpointPickerConfig",
        "plugins": [{"type": "queue-scorer"}, {"type": "kv-cache-utilization-scorer"}, {"type": "prefix-cache-scorer"},
                    {"type": "weighted-random-picker"}],
        "schedulingProfiles": [{"name": "default", "plugins": [
            {"pluginRef": "queue-scorer", "weight": 1}, {"pluginRef": "kv-cache-utilization-scorer", "weight": 1},
            {"pluginRef": "prefix-cache-scorer", "weight": 1}, {"pluginRef": "weighted-random-picker"}]}]}),
}


@contextmanager
def sim_fleet(servers: int, server_type: str = "h100") -> Iterator[list[str]]:
    """``servers`` simulated servers, one process each on ``127.0.0.<11+i>`` and one shared port; yields their
    ``host:port`` addresses."""
    hosts = [f"127.0.0.{FIRST_ADDRESS + i}" for i in range(servers)]
    port = free_port(hosts)
    processes = []
    try:
        for i, host in enumerate(hosts):
            popen = subprocess.Popen([sys.executable, "-m", "headroom.cli.main", "sim", "serve", "--servers", "1",
                                      "--server-type", server_type, "--base-port", str(port), "--seed", str(i + 1)],
                                     env={**_environ(), "HEADROOM_SIM_HOST": host}, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            processes.append(Process(f"sim-{i}", popen))
        addresses = [f"{host}:{port}" for host in hosts]
        deadline = time.monotonic() + START_S
        for process, address in zip(processes, addresses, strict=True):
            while not _answers(f"http://{address}/health"):
                if process.popen.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"simulated server {address} did not start (exit {process.popen.poll()})")
                time.sleep(0.2)
        yield addresses
    finally:
        for process in processes:
            process.stop()


@contextmanager
def epp_pool(addresses: list[str]) -> Iterator[KubeApi]:
    """A real API server holding GIE's CRDs, an InferencePool over ``addresses`` (one shared port) and a Ready
    Pod per address."""
    from kubernetes import client

    with kube_api() as kube:
        admin = kube.admin
        _install_crds(admin)
        port = int(addresses[0].rpartition(":")[2])
        client.CustomObjectsApi(admin).create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "inferencepools", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "InferencePool", "metadata": {"name": POOL},
            "spec": {"selector": {"matchLabels": LABELS}, "targetPorts": [{"number": port}],
                     "endpointPickerRef": {"name": "epp", "port": {"number": 9002}}}})
        core = client.CoreV1Api(admin)
        for i, address in enumerate(addresses):
            ip = address.rpartition(":")[0]
            name = f"sim-{i}"
            core.create_namespaced_pod(NAMESPACE, client.V1Pod(
                metadata=client.V1ObjectMeta(name=name, labels=LABELS),
                spec=client.V1PodSpec(containers=[client.V1Container(name="vllm", image="headroom-sim")])))
            core.patch_namespaced_pod_status(name, NAMESPACE, {"status": {
                "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                "conditions": [{"type": "Ready", "status": "True"}]}})
        yield kube


def start_epp(kube: KubeApi, config: str, folder: Path) -> tuple[Process, int]:
    """The EPP with configuration ``config`` (a name of :data:`CONFIGS`) over the pool of :func:`epp_pool`;
    returns it and its ext_proc port once that port takes connections (whether it routes yet is the caller's to
    check: :func:`benchmarks.ext_proc.wait_routed`)."""
    grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
    command = [str(build_tool("epp")), "--pool-name", POOL, "--pool-namespace", NAMESPACE, "--pool-group", GROUP,
               "--grpc-port", str(grpc_port), "--grpc-health-port", str(health_port), "--metrics-port",
               str(metrics_port), "--zap-encoder", "json", "--tracing=false", "--metrics-endpoint-auth=false",
               "--secure-serving=false", "-v", "1"]
    text = CONFIGS[config]
    if text is not None:
        path = folder / f"epp-{config}.yaml"
        path.write_text(text)
        command += ["--config-file", str(path)]
    log = folder / f"epp-{config}.log"
    with open(log, "wb") as out:
        popen = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env={**_environ(), "KUBECONFIG": str(kube.kubeconfig("admin")),
                                      "NAMESPACE": NAMESPACE, "POD_NAME": f"epp-{config}"})
    process = Process(f"epp-{config}", popen)
    deadline = time.monotonic() + 120
    while not _serving(grpc_port):
        if popen.poll() is not None or time.monotonic() > deadline:
            process.stop()
            raise RuntimeError(f"the EPP ({config}) did not become ready:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.3)
    return process, grpc_port


def _install_crds(admin: object) -> None:
    from kubernetes import client

    extensions = client.ApiextensionsV1Api(admin)
    names = []
    for path in sorted((build_tool("gie-source") / "config" / "crd" / "bases").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        names.append(crd["metadata"]["name"])
        extensions.create_custom_resource_definition(crd)
    deadline = time.monotonic() + 60
    for name in names:
        while not _established(extensions.read_custom_resource_definition(name)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"CRD {name} was not established within 60 s")
            time.sleep(0.2)


def _established(crd: V1CustomResourceDefinition) -> bool:
    conditions = crd.status.conditions if crd.status is not None else None
    return any(c.type == "Established" and c.status == "True" for c in conditions or ())


def _serving(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _environ() -> dict[str, str]:
    import os
    return dict(os.environ)
