"""Pod discovery against a real Kubernetes API server: the router, holding only the chart's Role, follows
the model-server pods of its pool as they join, turn ready or not, change labels and leave, while
requests flow through it to live simulated servers.

No kubelet runs, so the test plays one: it writes each pod's IP and Ready condition to the pod's status.
The pods' IPs are loopback addresses (127.0.0.2, ...) where simulated servers listen on the pool's target
port, as model servers listen on their pod IPs.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest
from kubernetes import client

from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.app.config import load_config
from headroom.router.app.server import RouterServer
from headroom.sim.live import LiveServer
from headroom.sim.profile import profile
from tests.conftest import free_port
from tests.deploy.resources import render
from tests.router.routercases import wait_for

pytestmark = [pytest.mark.kube, pytest.mark.timeout(1800)]  # the first use builds helm or the API server

NAMESPACE = "discovery"  # the router's service account lives here (tests.kube.USERS)
LABELS = {"app": "vllm-llama3-8b-instruct"}


@pytest.fixture(scope="module")
def core(kube_api, helm) -> client.CoreV1Api:
    """The namespace, with the ServiceAccount, Role and RoleBinding exactly as the chart renders them."""
    admin = kube_api.admin
    core = client.CoreV1Api(admin)
    core.create_namespace({"metadata": {"name": NAMESPACE}})
    rbac = client.RbacAuthorizationV1Api(admin)
    for obj in render(helm, release="headroom", namespace=NAMESPACE):
        if obj["kind"] == "ServiceAccount" and obj["metadata"]["name"] == "headroom-router":
            core.create_namespaced_service_account(NAMESPACE, obj)
        elif obj["kind"] == "Role":
            rbac.create_namespaced_role(NAMESPACE, obj)
        elif obj["kind"] == "RoleBinding":
            rbac.create_namespaced_role_binding(NAMESPACE, obj)
    return core


def pod(name: str) -> dict:
    """A model-server pod as its Deployment would create it: scheduled, not started (no IP, not ready)."""
    return {"metadata": {"name": name, "labels": {**LABELS, "pool": "h100"}},
            "spec": {"nodeName": "gpu-node", "containers": [{"name": "vllm", "image": "vllm/vllm-openai",
                                                             "ports": [{"name": "http", "containerPort": 8000}]}]}}


def set_ready(core: client.CoreV1Api, name: str, ready: bool, ip_suffix: int) -> None:
    core.patch_namespaced_pod_status(name, NAMESPACE, {"status": {
        "podIP": f"127.0.0.{ip_suffix}", "podIPs": [{"ip": f"127.0.0.{ip_suffix}"}],
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}})


def test_the_router_follows_the_pools_pods_while_requests_flow(core, kube_api, monkeypatch):
    port = free_port()
    monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig("router")))  # the router's own service account
    config = load_config({"settings": {"httpPort": 0, "pickPort": -1, "extProcPort": -1, "telemetry": False,
                                       "predictor": "none", "scrapeIntervalS": 0.05, "seed": 3},
                          "pods": {"namespace": NAMESPACE, "selector": LABELS, "port": port, "poolLabel": "pool"}},
                         environ={})

    async def scenario() -> None:
        sims = {i: LiveServer(profile("h100"), f"vllm-{i}", host=f"127.0.0.{i}", port=port, time_scale=20.0, seed=i)
                for i in (2, 3, 4, 5)}
        for sim in sims.values():
            await sim.start()
        router = RouterServer(config, from_env(KafkaSettings, {}))
        served: list[tuple[int, str]] = []  # (status, pod that served it)
        stop = asyncio.Event()

        async def traffic() -> None:
            async with aiohttp.ClientSession() as http:
                for i in range(5000):  # bounded: about 100 requests a second at most, for a minute at most
                    if stop.is_set():
                        return
                    async with http.post(f"http://127.0.0.1:{router.http_port}/v1/completions",
                                         json={"prompt": f"request {i}", "max_tokens": 2}) as answer:
                        await answer.read()
                        served.append((answer.status, answer.headers.get("x-headroom-server", "")))
                    await asyncio.sleep(0.01)

        def servers() -> set[str]:
            return set(router.pool.servers)

        async def served_by(requests: int = 20) -> set[str]:
            """The pods that served the next ``requests`` requests (all of which must succeed), after the one the
            sequential traffic may have had in flight, dispatched before the pool changed."""
            start = len(served) + 1
            assert await wait_for(lambda: len(served) >= start + requests, 30.0)
            statuses = {status for status, _ in served[start:start + requests]}
            assert statuses == {200}
            return {server for _, server in served[start:start + requests]}

        try:
            for i in (2, 3, 4):
                core.create_namespaced_pod(NAMESPACE, pod(f"vllm-{i}"))
            await router.start()
            assert await wait_for(lambda: router.pods.servers == () and router.pods.last_error is None, 10.0)
            for i in (2, 3):
                set_ready(core, f"vllm-{i}", True, i)
            assert await wait_for(lambda: servers() == {"vllm-2", "vllm-3"}, 10.0)
            spec = router.pool.servers["vllm-2"]
            assert (spec.address, spec.pool_key, spec.scrape_url, spec.namespace, spec.pod) == (
                f"127.0.0.2:{port}", "h100", f"http://127.0.0.2:{port}/metrics", NAMESPACE, "vllm-2")
            flow = asyncio.create_task(traffic())
            assert await served_by() <= {"vllm-2", "vllm-3"}

            set_ready(core, "vllm-4", True, 4)  # joins
            assert await wait_for(lambda: servers() == {"vllm-2", "vllm-3", "vllm-4"}, 10.0)
            assert await wait_for(lambda: router.pool.scrapes["vllm-4"].metrics is not None, 10.0)
            assert "vllm-4" in await served_by(60)

            set_ready(core, "vllm-2", False, 2)  # not ready: leaves
            assert await wait_for(lambda: servers() == {"vllm-3", "vllm-4"}, 10.0)
            assert await served_by() <= {"vllm-3", "vllm-4"}

            core.patch_namespaced_pod("vllm-3", NAMESPACE, {"metadata": {"labels": {"app": "other"}}})  # relabelled
            core.create_namespaced_pod(NAMESPACE, pod("vllm-5"))  # a new pod, ready at once
            set_ready(core, "vllm-5", True, 5)
            assert await wait_for(lambda: servers() == {"vllm-4", "vllm-5"}, 10.0)
            assert await served_by() <= {"vllm-4", "vllm-5"}

            core.delete_namespaced_pod("vllm-4", NAMESPACE, grace_period_seconds=0)  # deleted
            assert await wait_for(lambda: servers() == {"vllm-5"}, 10.0)
            assert await served_by() == {"vllm-5"}
            stop.set()
            await flow
            assert router.pods.last_error is None
        finally:
            stop.set()
            await router.stop()
            for sim in sims.values():
                await sim.stop()
            for name in ("vllm-2", "vllm-3", "vllm-5"):
                with contextlib.suppress(client.ApiException):
                    core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)

    asyncio.run(asyncio.wait_for(scenario(), 120))


def test_the_chart_role_grants_the_router_its_namespaces_pods_and_nothing_more(core, kube_api):
    from kubernetes import config
    router = config.new_client_from_config(str(kube_api.kubeconfig("router")))
    api = client.CoreV1Api(router)
    assert api.list_namespaced_pod(NAMESPACE).items is not None  # allowed
    for denied in (lambda: api.list_namespaced_secret(NAMESPACE), lambda: api.list_namespaced_pod("default"),
                   lambda: api.list_pod_for_all_namespaces(),
                   lambda: api.delete_namespaced_pod("anything", NAMESPACE),
                   lambda: api.patch_namespaced_pod_status("anything", NAMESPACE, {})):
        with pytest.raises(client.ApiException) as refused:
            denied()
        assert refused.value.status == 403


def test_a_router_without_api_access_keeps_serving_and_says_why(kube_api, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig("nobody")))  # a token the API server does not know
    config = load_config({"settings": {"httpPort": 0, "pickPort": -1, "extProcPort": -1, "telemetry": False,
                                       "predictor": "none"},
                          "pods": {"namespace": NAMESPACE, "selector": LABELS}}, environ={})

    async def scenario() -> str | None:
        router = RouterServer(config, from_env(KafkaSettings, {}))
        await router.start()
        try:
            await wait_for(lambda: router.pods.last_error is not None, 10.0)
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{router.http_port}/healthz") as answer:
                    assert answer.status == 200
            return router.pods.last_error
        finally:
            await router.stop()

    assert asyncio.run(scenario()) == "Kubernetes API: 401 Unauthorized"
