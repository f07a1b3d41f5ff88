"""GIE's endpoint picker (v1.5.0, built by ``infra/build-tool epp``) with headroom's sidecars, deployed as the
Inference Extension's ``inferencepool`` chart renders them with the drop-in values of
``infra/llmd/inferencepool-values.yaml``, on this machine.

:func:`render` runs the real chart through real ``helm``. :class:`EppPod` then does what a kubelet and a
cluster would: the CRDs, the rendered ``InferencePool`` and the model-server Pods go to the real API server
(Pods on their own loopback addresses, their status written by hand, with no kubelet to write it), one
``headroom sim serve`` per Pod on the pool's target port, and the rendered Deployment's containers as
processes — the endpoint picker with its rendered arguments, configuration and environment (its ports free
ones, plaintext), each sidecar with the command the image runs for it (``infra/image/uvicorn`` for the
``uvicorn`` the chart names, the image's entry point ``headroom llmd sidecar --`` otherwise) and the
environment of its ConfigMap. Everything is started at once, as a Pod's containers are.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import free_port
from tests.kube import ROOT, KubeApi, build_tool

VALUES = ROOT / "infra" / "llmd" / "inferencepool-values.yaml"
SHIM = ROOT / "infra" / "image" / "uvicorn"
ENTRYPOINT = ["headroom", "llmd", "sidecar", "--"]  # the sidecar image's (Dockerfile, target llmd-sidecars)
GROUP, VERSION = "inference.networking.k8s.io", "v1"


def gie_source() -> Path:
    return build_tool("gie-source")


def render(helm: Path, release: str, namespace: str, overrides: dict[str, Any], scratch: Path) -> list[dict]:
    """The inferencepool chart rendered with the drop-in values, then ``overrides``, as objects."""
    charts = scratch / "charts"
    if not charts.exists():
        shutil.copytree(gie_source() / "config" / "charts", charts)
        subprocess.run([str(helm), "dependency", "build", str(charts / "inferencepool")], check=True,
                       capture_output=True, timeout=120)
    extra = scratch / f"values-{release}.yaml"
    extra.write_text(yaml.safe_dump(overrides))
    done = subprocess.run([str(helm), "template", release, str(charts / "inferencepool"), "--namespace", namespace,
                           "-f", str(VALUES), "-f", str(extra)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def rendered(objects: list[dict], kind: str, name_part: str = "") -> dict:
    [found] = [o for o in objects if o["kind"] == kind and name_part in o["metadata"]["name"]]
    return found


def install_crds(kube: KubeApi) -> None:
    """GIE's CRDs, once; returns when the API server serves them."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    extensions = client.ApiextensionsV1Api(kube.admin)
    names = []
    for path in sorted((gie_source() / "config" / "crd" / "bases").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        names.append(crd["metadata"]["name"])
        try:
            extensions.create_custom_resource_definition(crd)
        except ApiException as err:
            if err.status != 409:
                raise
    deadline = time.monotonic() + 60
    for name in names:
        while not any(c.type == "Established" and c.status == "True"
                      for c in extensions.read_custom_resource_definition(name).status.conditions or ()):
            assert time.monotonic() < deadline, f"CRD {name} not established"
            time.sleep(0.2)


def create_pool(kube: KubeApi, namespace: str, pool: dict, addresses: list[str]) -> None:
    """The namespace, the rendered InferencePool, and one Ready Pod per address matching its selector."""
    from kubernetes import client

    core = client.CoreV1Api(kube.admin)
    core.create_namespace({"metadata": {"name": namespace}})
    client.CustomObjectsApi(kube.admin).create_namespaced_custom_object(GROUP, VERSION, namespace,
                                                                      "inferencepools", pool)
    labels = pool["spec"]["selector"]["matchLabels"]
    for i, address in enumerate(addresses):
        name = f"sim-{i}"
        core.create_namespaced_pod(namespace, {"metadata": {"name": name, "labels": labels}, "spec": {
            "containers": [{"name": "vllm", "image": "headroom-sim"}]}})
        core.patch_namespaced_pod_status(name, namespace, {"status": {
            "phase": "Running", "podIP": address, "podIPs": [{"ip": address}],
            "conditions": [{"type": "Ready", "status": "True"}]}})


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


@dataclass
class EppPod:
    """The rendered Deployment's containers as processes, beside the pool's simulated servers."""

    objects: list[dict]
    kube: KubeApi
    namespace: str
    folder: Path
    sim_addresses: list[str]
    sim_port: int
    streaming: bool = False
    environ: dict[str, str] = field(default_factory=dict)  # for every process: the broker's topics, trust
    ports: dict[str, int] = field(default_factory=dict)
    processes: list[Process] = field(default_factory=list)

    def start(self) -> EppPod:
        """Start the simulated servers, then the Pod's containers together; returns at once."""
        for i, address in enumerate(self.sim_addresses):
            self._spawn(f"sim-{i}", [sys.executable, "-m", "headroom.cli.main", "sim", "serve", "--servers", "1",
                                     "--base-port", str(self.sim_port), "--seed", str(i)],
                        {"HEADROOM_SIM_HOST": address})
        for address in self.sim_addresses:
            wait_until(lambda a=address: answers(f"http://{a}:{self.sim_port}/health"), 60, f"sim {address}",
                       self.processes)
        deployment = rendered(self.objects, "Deployment")
        configs = {c["metadata"]["name"]: c["data"] for c in self.objects if c["kind"] == "ConfigMap"}
        self.started_at = time.monotonic()
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            if container["name"] == "epp":
                self._start_epp(container, configs)
            else:
                env = {k: v for source in container.get("envFrom", ()) for k, v in
                       configs[source["configMapRef"]["name"]].items()}
                env.update({e["name"]: e["value"] for e in container.get("env", ()) if "value" in e})
                command = container.get("command") or ENTRYPOINT
                command = [str(SHIM)] if command == ["uvicorn"] else command
                self._spawn(container["name"], [*command, *container.get("args", ())], env)
        return self

    def _start_epp(self, container: dict, configs: dict[str, dict]) -> None:
        [plugins] = [data["default-plugins.yaml"] for data in configs.values() if "default-plugins.yaml" in data]
        config = yaml.safe_load(plugins)
        if self.streaming:
            [producer] = [p for p in config["plugins"] if p["type"] == "predicted-latency-producer"]
            producer["parameters"] = {**producer.get("parameters", {}), "streamingMode": True}
        config_file = self.folder / "plugins.yaml"
        config_file.write_text(yaml.safe_dump(config))
        self.ports.update(grpc=free_port(), health=free_port(), metrics=free_port())
        args = list(container["args"])
        args[args.index("--config-file") + 1] = str(config_file)
        args += ["--grpc-port", str(self.ports["grpc"]), "--grpc-health-port", str(self.ports["health"]),
                 "--metrics-port", str(self.ports["metrics"]), "--secure-serving=false"]  # plaintext, as Envoy here
        env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        env.update(NAMESPACE=self.namespace, POD_NAME="epp-0", KUBECONFIG=str(self.kube.kubeconfig("admin")))
        self._spawn("epp", [str(build_tool("epp")), *args], env)

    def _spawn(self, name: str, command: list[str], env: dict[str, str]) -> None:
        log = self.folder / f"{name}.log"
        path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # `headroom` of this checkout
        with open(log, "wb") as out:
            popen = subprocess.Popen(command, env={**os.environ, "PATH": path, **self.environ, **env},
                                     stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT)
        self.processes.append(Process(name, popen, log))

    def process(self, name: str) -> Process:
        [found] = [p for p in self.processes if p.name == name]
        return found

    def stop(self) -> None:
        """The endpoint picker first (it calls the others), then the rest."""
        for process in sorted(reversed(self.processes), key=lambda p: p.name != "epp"):
            process.stop()

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"--- {p.name} (exit {p.popen.poll()})\n{p.text()[-tail:]}" for p in self.processes)


def wait_until(condition, timeout_s: float, what: str, processes: list[Process] = ()) -> float:
    """Poll ``condition`` until it holds (returns the seconds it took); fails naming ``what`` otherwise, or as
    soon as one of ``processes`` exits."""
    started = time.monotonic()
    while not condition():
        for process in processes:
            assert process.popen.poll() is None, f"{process.name} exited waiting for {what}:\n{process.text()[-3000:]}"
        assert time.monotonic() - started < timeout_s, f"{what}: not within {timeout_s:.0f} s"
        time.sleep(0.2)
    return time.monotonic() - started


def answers(url: str, headers: dict[str, str] | None = None) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def serving(port: int, service: str = "inference-extension") -> bool:
    """Whether the endpoint picker's gRPC health service answers SERVING (what the chart's probes ask)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service),
                                                               timeout=2)
        except grpc.RpcError:
            return False
    return answer.status == health_pb2.HealthCheckResponse.SERVING


def scrape(url: str) -> dict[str, float]:
    """Prometheus samples as ``{'name{labels}': value}``."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def total(samples: dict[str, float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    pattern = re.compile(rf"^{re.escape(name)}(\{{.*\}})?$")
    return sum(value for key, value in samples.items() if pattern.match(key)
               and all(f'{k}="{v}"' in key for k, v in labels.items()))


def errors(log: str) -> list[dict]:
    """The ERROR-level lines of the endpoint picker's JSON log."""
    lines = []
    for line in log.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("level") == "error":
            lines.append(entry)
    return lines
