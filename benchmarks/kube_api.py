"""A real Kubernetes API server on loopback, for the tests' ``kube_api`` fixture and the benchmarks that run GIE's
endpoint picker: ``infra/kube-apiserver`` (built once into ``~/.cache/headroom/bin`` by ``infra/build-tool``)
over its own etcd, on free ports, with static bearer tokens and RBAC. No kubelet, scheduler or controllers run:
whoever starts it writes Pod objects and their status itself.

:func:`kube_api` starts it and stops it afterwards; :attr:`KubeApi.admin` is a ``system:masters`` client and
:meth:`KubeApi.kubeconfig` writes a kubeconfig for a user named in ``users`` (or for ``admin``).
"""

from __future__ import annotations

import ssl
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from headroom.errors import CommandError
from headroom.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
ADMIN_TOKEN = "admin-token"


def build_tool(name: str) -> Path:
    """The cached binary of ``name`` (``infra/build-tool``'s helm, kube-apiserver, epp or gie-source), built
    first when missing. It needs a source checkout: an installed wheel does not carry ``infra/``."""
    script = ROOT / "infra" / "build-tool"
    if not script.is_file():
        raise CommandError(f"building {name} needs a source checkout of headroom (its infra/build-tool); "
                           f"not found at {script}")
    done = subprocess.run([str(script), name], capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"infra/build-tool {name} failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip())


@dataclass
class KubeApi:
    url: str
    ca_file: Path
    folder: Path

    @property
    def admin(self) -> Any:
        """A ``kubernetes.client.ApiClient`` with every right."""
        from kubernetes import config
        return config.new_client_from_config(str(self.kubeconfig("admin")))

    def kubeconfig(self, user: str) -> Path:
        path = self.folder / f"kubeconfig-{user}.yaml"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": user, "user": {"token": ADMIN_TOKEN if user == "admin" else f"{user}-token"}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}]}))
        return path


@contextmanager
def kube_api(users: Mapping[str, tuple[str, str]] = {}) -> Iterator[KubeApi]:  # never mutated
    """A running API server (about 25 s to start); ``users``: name → (Kubernetes user name, groups), each
    authenticated by the token ``<name>-token``."""
    binary = build_tool("kube-apiserver")
    with tempfile.TemporaryDirectory(prefix="kube-api-") as tmp:
        folder = Path(tmp)
        etcd_port, port = free_port(), free_port()
        for command in (["openssl", "genrsa", "-out", "sa.key", "2048"],
                        ["openssl", "rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"]):
            subprocess.run(command, cwd=folder, check=True, capture_output=True)
        lines = [f'{ADMIN_TOKEN},admin,admin,"system:masters"']
        lines += [f'{user}-token,{name},{user},"{groups}"' for user, (name, groups) in users.items()]
        (folder / "tokens.csv").write_text("\n".join(lines) + "\n")
        with open(folder / "log.txt", "wb") as logs:
            etcd = subprocess.Popen([str(binary), "etcd", "--data-dir", str(folder / "etcd"), "--client-port",
                                     str(etcd_port), "--peer-port", str(free_port())], stdout=logs,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            server = subprocess.Popen([
                str(binary), "--bind-address=127.0.0.1", f"--secure-port={port}", "--advertise-address=127.0.0.1",
                "--endpoint-reconciler-type=none", f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                f"--cert-dir={folder / 'certs'}", "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={folder / 'sa.pub'}",
                f"--service-account-signing-key-file={folder / 'sa.key'}", "--service-cluster-ip-range=10.96.0.0/16",
                f"--token-auth-file={folder / 'tokens.csv'}", "--authorization-mode=RBAC",
                "--disable-admission-plugins=ServiceAccount"], stdout=logs, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL)
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


def _wait_ready(api: KubeApi, processes: list[subprocess.Popen[bytes]], log: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in processes):
            raise RuntimeError(f"the API server or its etcd exited:\n{log.read_text()[-4000:]}")
        if api.ca_file.exists():
            request = urllib.request.Request(f"{api.url}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
            try:
                with urllib.request.urlopen(request, timeout=2,
                                            context=ssl.create_default_context(cafile=api.ca_file)) as answer:
                    if answer.read() == b"ok":
                        return
            except OSError:
                pass
        time.sleep(0.5)
    raise RuntimeError(f"the API server was not ready within {timeout_s:.0f} s:\n{log.read_text()[-4000:]}")
