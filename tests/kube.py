"""Real Kubernetes tools for the tests, as session fixtures (registered by ``tests/conftest.py``).

- ``helm``: the path of a real ``helm`` binary, built once by ``infra/build-tool`` when missing.
- ``kube_api``: a real API server (``infra/kube-apiserver``, built the same way) over its own etcd, on
  loopback with free ports, started once per session (about 25 s) and stopped afterwards. No kubelet,
  scheduler or controllers run: a test writes Pod objects and their status itself. Requests are
  authorised by RBAC; ``kube_api.admin`` is a ``system:masters`` client and ``kube_api.kubeconfig(user)``
  writes a kubeconfig for one of :data:`USERS`, which hold nothing until a RoleBinding grants them more.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]
TOKENS = {"admin": "admin-token"}
# Users the API server knows by a static token: the router's service account in the namespace of the tests.
USERS = {"router": ("system:serviceaccount:discovery:headroom-router",
                    "system:serviceaccounts,system:serviceaccounts:discovery")}


def build_tool(name: str) -> Path:
    """The cached binary of ``name`` (helm, kube-apiserver, epp) or folder (gie-source), built first when missing."""
    done = subprocess.run([str(ROOT / "infra" / "build-tool"), name], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"infra/build-tool {name} failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip())


@pytest.fixture(scope="session")
def helm() -> Path:
    return build_tool("helm")


@dataclass
class KubeApi:
    url: str
    ca_file: Path
    folder: Path

    @property
    def admin(self):
        """A ``kubernetes.client.ApiClient`` with every right."""
        from kubernetes import config
        return config.new_client_from_config(str(self.kubeconfig("admin")))

    def kubeconfig(self, user: str) -> Path:
        path = self.folder / f"kubeconfig-{user}.yaml"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": user, "user": {"token": TOKENS.get(user, f"{user}-token")}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}]}))
        return path


@pytest.fixture(scope="session")
def kube_api() -> Iterator[KubeApi]:
    binary = build_tool("kube-apiserver")
    with tempfile.TemporaryDirectory(prefix="kube-api-") as tmp:
        folder = Path(tmp)
        etcd_port, port = free_port(), free_port()
        for command in (["openssl", "genrsa", "-out", "sa.key", "2048"],
                        ["openssl", "rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"]):
            subprocess.run(command, cwd=folder, check=True, capture_output=True)
        lines = [f'{TOKENS["admin"]},admin,admin,"system:masters"']
        lines += [f'{user}-token,{name},{user},"{groups}"' for user, (name, groups) in USERS.items()]
        (folder / "tokens.csv").write_text("\n".join(lines) + "\n")
        logs = open(folder / "log.txt", "wb")
        etcd = subprocess.Popen([str(binary), "etcd", "--data-dir", str(folder / "etcd"), "--client-port", str(etcd_port),
                                 "--peer-port", str(free_port())], stdout=logs, stderr=subprocess.STDOUT)
        server = subprocess.Popen([
            str(binary), "--bind-address=127.0.0.1", f"--secure-port={port}", "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none", f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            f"--cert-dir={folder / 'certs'}", "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={folder / 'sa.pub'}",
            f"--service-account-signing-key-file={folder / 'sa.key'}", "--service-cluster-ip-range=10.96.0.0/16",
            f"--token-auth-file={folder / 'tokens.csv'}", "--authorization-mode=RBAC",
            "--disable-admission-plugins=ServiceAccount"], stdout=logs, stderr=subprocess.STDOUT)
        try:
            api = KubeApi(f"https://127.0.0.1:{port}", folder / "certs" / "apiserver.crt", folder)
            _wait_ready(api, [etcd, server], folder / "log.txt")
            yield api
        finally:
            for process in (server, etcd):
                process.terminate()
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            logs.close()


def _wait_ready(api: KubeApi, processes: list[subprocess.Popen], log: Path, timeout_s: float = 120.0) -> None:
    import ssl
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in processes):
            raise RuntimeError(f"the API server or its etcd exited:\n{log.read_text()[-4000:]}")
        if api.ca_file.exists():
            request = urllib.request.Request(f"{api.url}/readyz",
                                             headers={"Authorization": f"Bearer {TOKENS['admin']}"})
            try:
                with urllib.request.urlopen(request, timeout=2,
                                            context=ssl.create_default_context(cafile=api.ca_file)) as answer:
                    if answer.read() == b"ok":
                        return
            except OSError:
                pass
        time.sleep(0.5)
    raise RuntimeError(f"the API server was not ready within {timeout_s:.0f} s:\n{log.read_text()[-4000:]}")
