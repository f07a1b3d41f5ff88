"""The chart's router as the kubelet, Prometheus, the gateway and a stranger meet it, under every security
combination the chart offers.

Each combination is rendered by a real ``helm``; every object is checked by a real API server (created with
server-side dry run; the router's RBAC created for real), and the router runs as a real ``headroom router
serve`` process from the rendered config and environment, with the router's own service account: the Secrets'
files sit in a folder standing in for their mounts, and only the listeners' addresses move to free loopback
ports. The test then does what the cluster would: every probe as the kubelet runs it (plain HTTP, no token, no
client certificate), a scrape as the PodMonitoring says, the gateway's ext_proc call with its credential, and
the calls of a caller holding none — refused, or (where the network is the gateway's proof) admitted only by
the NetworkPolicy's sources.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc
from kubernetes import client, utils

from headroom.certificates import CertificateAuthority
from headroom.router.proto import router_pb2, router_pb2_grpc
from tests.conftest import free_port
from tests.deploy.resources import CHART, render
from tests.keys import write_public_key
from tests.router.test_router_security import forged_exchange

pytestmark = [pytest.mark.kube, pytest.mark.e2e, pytest.mark.timeout(1800)]

NAMESPACE = "probes"  # the router's service account lives here (tests.kube.USERS)
GATEWAY_TOKEN, CLIENT_TOKEN = "gateway-secret", "client-secret"
GATEWAY_CIDR = [{"ipBlock": {"cidr": "10.129.0.0/23"}}]
TLS = ["--set", "tls.secret=headroom-tls"]
MTLS = [*TLS, "--set", "tls.requireClientCert=true"]
COMBINATIONS = {  # name -> helm arguments; the chart refuses any other way to leave the router open
    "defaults": [],  # client tokens, the gateway's token
    "tls": TLS,
    "mtls": [*MTLS, "--set", "router.authTokensSecret=", "--set", "router.gateway.trust=mtls",
             "--set-json", 'router.gateway.identities=["gateway.llm.svc"]'],
    "mtls-tokens-leader": [*MTLS, "--set", "router.leaderElection=true"],
    "network": ["--set", "router.gateway.trust=network", "--set-json",
                f"networkPolicy.gatewaySources={json.dumps(GATEWAY_CIDR)}"],
    "insecure-local": ["--set", "security.insecureLocal=true"],
}


@pytest.fixture(scope="module")
def cluster(kube_api, helm):
    """The namespace, with the router's ServiceAccount, Role and RoleBinding as the chart renders them with
    leader election (pods, and its Lease)."""
    admin = kube_api.admin
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": NAMESPACE}})
    for obj in render(helm, *base_values(1), *COMBINATIONS["mtls-tokens-leader"], release="headroom",
                      namespace=NAMESPACE):
        if obj["kind"] in ("ServiceAccount", "Role", "RoleBinding") and obj["metadata"]["name"] == "headroom-router":
            utils.create_from_dict(admin, obj, namespace=NAMESPACE)
    return admin


@pytest.fixture(scope="module")
def files(tmp_path_factory, pki) -> Path:
    """What the Secrets hold, laid out as the chart mounts them under /etc/headroom."""
    root = tmp_path_factory.mktemp("etc-headroom")
    tls = root / "tls"
    tls.mkdir()
    (tls / "tls.crt").write_bytes(pki.server[0].read_bytes())
    (tls / "tls.key").write_bytes(pki.server[1].read_bytes())
    (tls / "ca.crt").write_bytes(pki.ca.read_bytes())
    for folder, token in (("auth", CLIENT_TOKEN), ("gateway", GATEWAY_TOKEN)):
        (root / folder).mkdir()
        (root / folder / "tokens").write_text(token + "\n")
    write_public_key(root / "trusted-keys")
    ca = CertificateAuthority.load(pki.ca, pki.ca.with_name("ca.key"))
    ca.issue("envoy", ("gateway.llm.svc",)).write(root, "gateway-client")
    return root


def base_values(kafka_port: int) -> list[str]:
    """Kafka in plaintext at a port where nothing listens (telemetry is buffered), remote prediction (no model
    to wait for), and Google Managed Prometheus scraping every component."""
    return ["--set", "kafka.security.protocol=PLAINTEXT", "--set", f"kafka.bootstrapServers=127.0.0.1:{kafka_port}",
            "--set", "router.predictor=remote", "--set", "monitoring.podMonitoring.enabled=true"]


class RunningRouter:
    def __init__(self, objects: list[dict], files: Path, kubeconfig: Path, scratch: Path):
        self.objects = objects
        deployment = self.find("Deployment", "headroom-router")
        self.container = deployment["spec"]["template"]["spec"]["containers"][0]
        config = yaml.safe_load(self.find("ConfigMap", "headroom-router")["data"]["router.yaml"])
        named = {"http": "httpPort", "pick": "pickPort", "ext-proc": "extProcPort", "health": "metricsPort"}
        self.ports = {name: free_port() for name in named}  # container port name -> where it listens here
        config["settings"].update({"host": "127.0.0.1", **{named[n]: port for n, port in self.ports.items()}})
        (scratch / "router.yaml").write_text(yaml.safe_dump(config))
        environ = {k: v for k, v in os.environ.items() if not k.startswith("HEADROOM_")}
        for entry in self.container["env"]:
            value = entry.get("value")
            if value is None:  # valueFrom: the pod's name
                assert entry["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}, entry
                value = "headroom-router-7f9c-0"
            environ[entry["name"]] = value.replace("/etc/headroom", str(files))
        environ["KUBECONFIG"] = str(kubeconfig)
        self.log = open(scratch / "router.log", "wb")
        self.process = subprocess.Popen([sys.executable, "-m", "headroom.cli.main", "router", "serve", "--config",
                                         str(scratch / "router.yaml")], env=environ, stdout=self.log,
                                        stderr=subprocess.STDOUT)
        self.scratch = scratch

    def find(self, kind: str, name: str) -> dict:
        [obj] = [o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name]
        return obj

    def probe(self, kind: str) -> int:
        """The probe's outcome as the kubelet sees it: the HTTP status, or 0 when nothing answered."""
        get = self.container[kind]["httpGet"]
        url = f"{get.get('scheme', 'HTTP').lower()}://127.0.0.1:{self.ports[get['port']]}{get['path']}"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return answer.status
        except urllib.error.HTTPError as err:
            return err.code
        except OSError:
            return 0

    def wait_started(self) -> None:
        """As the kubelet runs the startup probe: every period, until it passes or fails too often."""
        probe = self.container["startupProbe"]
        for _ in range(probe["failureThreshold"] * 4):  # this shared machine is slower than a node
            if self.process.poll() is not None:
                raise AssertionError(f"the router exited:\n{self.output()[-4000:]}")
            if 200 <= self.probe("startupProbe") < 400:
                return
            time.sleep(probe["periodSeconds"])
        raise AssertionError(f"the startup probe never passed:\n{self.output()[-4000:]}")

    def eventually(self, kind: str, timeout_s: float = 30.0) -> int:
        deadline = time.monotonic() + timeout_s
        while (status := self.probe(kind)) != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        return status

    def scrape(self) -> tuple[int, str]:
        """``/metrics`` as the router's PodMonitoring endpoint says, with no credential."""
        [monitor] = [o for o in self.objects if o["kind"] == "PodMonitoring" and o["metadata"]["name"] ==
                     "headroom-router"]
        endpoint = monitor["spec"]["endpoints"][0]
        url = f"{endpoint['scheme']}://127.0.0.1:{self.ports[endpoint['port']]}{endpoint['path']}"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        finally:
            self.log.close()

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return (self.scratch / "router.log").read_text()


def proxy_status(router: RunningRouter, pki) -> int | str:
    """A completion asked of the proxy with no token and no client certificate: the status, or how TLS failed."""
    tls = "HEADROOM_TLS_CERT_FILE" in {e["name"] for e in router.container["env"]}
    request = urllib.request.Request(f"{'https' if tls else 'http'}://127.0.0.1:{router.ports['http']}/v1/completions",
                                     data=b'{"prompt": "hi", "max_tokens": 1}',
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5, context=ssl.create_default_context(cafile=str(pki.ca))
                                    if tls else None) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, ssl.SSLError, ConnectionError):
        return "refused by TLS"


async def grpc_calls(router: RunningRouter, files: Path, pki) -> dict[str, object]:
    """A stranger's Report and ext_proc exchange (no token, no certificate, or a certificate of the CA that is
    not the gateway's), and the gateway's exchange with its credential: each one's answer or status code."""
    mutual = "HEADROOM_TLS_CLIENT_CA_FILE" in {e["name"] for e in router.container["env"]}
    listener_tls = "HEADROOM_TLS_CERT_FILE" in {e["name"] for e in router.container["env"]}
    address = f"127.0.0.1:{router.ports['ext-proc']}"
    # the listeners' CA, or the certificate ext_proc made for itself, as a gateway that skips verification takes it
    root = pki.ca.read_bytes() if listener_tls else \
        ssl.get_server_certificate(("127.0.0.1", router.ports["ext-proc"])).encode()

    def credentials(cert: tuple[Path, Path] | None, token: str | None = None):
        made = grpc.ssl_channel_credentials(root,
                                            cert[1].read_bytes() if cert else None, cert[0].read_bytes() if cert else None)
        return made if token is None else grpc.composite_channel_credentials(
            made, grpc.access_token_call_credentials(token))

    async def exchange(creds) -> object:
        async with grpc.aio.secure_channel(address, creds, options=[("grpc.ssl_target_name_override", "localhost")]
                                           ) as channel:
            call = ep_grpc.ExternalProcessorStub(channel).Process(timeout=10)
            try:
                for message in forged_exchange("stranger"):
                    await call.write(message)
                    reply = await call.read()
                    if reply.HasField("immediate_response"):
                        return reply.immediate_response.status.code  # answered: no pod yet, 503
                return reply.WhichOneof("response")
            except grpc.RpcError as err:
                return err.code()

    async def report(creds, tls: bool) -> object:
        target = f"127.0.0.1:{router.ports['pick']}"
        channel = grpc.aio.secure_channel(target, creds) if tls else grpc.aio.insecure_channel(target)
        async with channel:
            try:
                await router_pb2_grpc.RouterStub(channel).Report(router_pb2.ReportRequest(
                    request_id="made-up", e2e_ms=4000, output_tokens=5), timeout=10)
                return grpc.StatusCode.OK
            except grpc.RpcError as err:
                return err.code()

    gateway_cert = (files / "gateway-client.pem", files / "gateway-client.key")
    client_pick = grpc.ssl_channel_credentials(pki.ca.read_bytes()) if listener_tls else None
    return {
        "stranger's exchange": await exchange(credentials(None)),
        "CA client's exchange": await exchange(credentials(pki.client)) if mutual else None,
        "gateway's exchange": await exchange(credentials(gateway_cert if mutual else None, GATEWAY_TOKEN)),
        "stranger's report": await report(client_pick, listener_tls),
    }


@pytest.mark.parametrize("name", list(COMBINATIONS))
def test_probes_scrapes_and_callers_under_every_security_combination(name, cluster, helm, kube_api, files, pki,
                                                                     tmp_path):
    objects = render(helm, *base_values(free_port()), *COMBINATIONS[name], release="headroom", namespace=NAMESPACE)
    for obj in objects:  # the real API server validates every built-in object (server-side apply, dry run)
        if obj["apiVersion"].split("/")[0] in ("v1", "apps", "policy", "networking.k8s.io", "rbac.authorization.k8s.io",
                                               "autoscaling"):
            utils.create_from_dict(cluster, obj, namespace=NAMESPACE, apply=True, dry_run="All", force_conflicts=True)
    router = RunningRouter(objects, files, kube_api.kubeconfig("chart-probes"), tmp_path)
    try:
        router.wait_started()
        probes = {kind: router.eventually(kind) for kind in ("readinessProbe", "livenessProbe")}
        scraped, metrics = router.scrape()
        proxy = proxy_status(router, pki)
        calls = asyncio.run(asyncio.wait_for(grpc_calls(router, files, pki), 60))
        _, after = router.scrape()
    finally:
        code = router.stop()
    assert probes == {"readinessProbe": 200, "livenessProbe": 200}, router.output()[-4000:]
    assert scraped == 200 and "headroom_router_decisions_total" in metrics
    assert code == 0, router.output()[-4000:]
    log = router.output()
    refused = 'headroom_router_unauthenticated_total{listener="ext_proc"}'
    expected_proxy = {"insecure-local": 503, "mtls": "refused by TLS", "mtls-tokens-leader": "refused by TLS"}
    assert proxy == expected_proxy.get(name, 401)  # 503: admitted, and no pod to send it to
    mutual = name.startswith("mtls")
    assert calls["stranger's exchange"] == {
        "defaults": grpc.StatusCode.UNAUTHENTICATED, "tls": grpc.StatusCode.UNAUTHENTICATED,
        "mtls": grpc.StatusCode.UNAVAILABLE, "mtls-tokens-leader": grpc.StatusCode.UNAVAILABLE,
        "network": 503, "insecure-local": 503}[name]
    assert calls["gateway's exchange"] == 503  # the gateway is admitted; the pool has no pod yet
    if mutual:  # a certificate of the listeners' CA is not the gateway's
        assert calls["CA client's exchange"] == grpc.StatusCode.UNAUTHENTICATED
    assert calls["stranger's report"] == {
        "defaults": grpc.StatusCode.UNAUTHENTICATED, "tls": grpc.StatusCode.UNAUTHENTICATED,
        "mtls": grpc.StatusCode.UNAVAILABLE, "mtls-tokens-leader": grpc.StatusCode.UNAVAILABLE,
        "network": grpc.StatusCode.UNAUTHENTICATED, "insecure-local": grpc.StatusCode.NOT_FOUND}[name]
    if name in ("defaults", "tls"):
        assert f"{refused} 1.0" in after
    if name == "network":  # the NetworkPolicy is what keeps the stranger out: only the gateway's proxies reach ext_proc
        [policy] = [o for o in objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "headroom-router"]
        [rule] = [r for r in policy["spec"]["ingress"] if r["ports"] == [{"port": "ext-proc", "protocol": "TCP"}]]
        assert rule["from"] == GATEWAY_CIDR and "HEADROOM_ROUTER_GATEWAY_BY_NETWORK" in log
    if name == "insecure-local":
        assert "HEADROOM_ROUTER_UNAUTHENTICATED_TELEMETRY is on" in log
        assert not [o for o in objects if o["kind"] == "NetworkPolicy"]


def test_the_opt_out_is_announced_at_install(cluster, helm, kube_api, tmp_path):
    """``helm install`` against the API server (a server-side dry run) prints the insecure mode's warning. (The
    chart is copied without its kubeVersion: the test API server, built from source, calls itself v0.0.0.)"""
    chart = tmp_path / "headroom"
    shutil.copytree(CHART, chart)
    (chart / "Chart.yaml").write_text("".join(line for line in (CHART / "Chart.yaml").read_text().splitlines(True)
                                              if not line.startswith("kubeVersion:")))

    def install(*args: str) -> str:
        done = subprocess.run([str(helm), "install", "notes", str(chart), "--namespace", NAMESPACE, "--dry-run=server",
                               "--kubeconfig", str(kube_api.kubeconfig("admin")), "--set", "inferencePool.enabled=false",
                               *base_values(free_port())[:-2], *args], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.split("NOTES:", 1)[1]
    assert "!!! INSECURE LOCAL MODE (security.insecureLocal=true) !!!" in install("--set", "security.insecureLocal=true")
    assert "INSECURE" not in install() and "ext_proc takes telemetry from the gateway alone (trust: token)" in install()
