"""Real Kubernetes tools for the tests, as session fixtures (registered by ``tests/conftest.py``).

- ``helm``: the path of a real ``helm`` binary, built once by ``infra/build-tool`` when missing.
- ``kube_api``: a real API server (:mod:`benchmarks.kube_api`: ``infra/kube-apiserver``, built the same way, over
  its own etcd, on loopback with free ports), started once per session (about 25 s) and stopped afterwards. No kubelet,
  scheduler or controllers run: a test writes Pod objects and their status itself. Requests are
  authorised by RBAC; ``kube_api.admin`` is a ``system:masters`` client and ``kube_api.kubeconfig(user)``
  writes a kubeconfig for one of :data:`USERS`, which hold nothing until a RoleBinding grants them more.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from headroom.benchmarks.kube_api import ADMIN_TOKEN, ROOT, KubeApi, build_tool
from headroom.benchmarks.kube_api import kube_api as running_kube_api

__all__ = ["ROOT", "TOKENS", "USERS", "KubeApi", "build_tool"]

TOKENS = {"admin": ADMIN_TOKEN}
# Users the API server knows by a static token: the router's service account in the namespaces of the tests.
USERS = {"router": ("system:serviceaccount:discovery:headroom-router",
                    "system:serviceaccounts,system:serviceaccounts:discovery"),
         "chart-probes": ("system:serviceaccount:probes:headroom-router",
                          "system:serviceaccounts,system:serviceaccounts:probes")}


@pytest.fixture(scope="session")
def helm() -> Path:
    return build_tool("helm")


@pytest.fixture(scope="session")
def kube_api() -> Iterator[KubeApi]:
    with running_kube_api(USERS) as api:
        yield api
