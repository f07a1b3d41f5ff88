"""Leader election among router replicas through a real Lease on a real API server."""

import asyncio
import datetime
import time

import aiohttp
import pytest
from kubernetes import client

from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.app.leader import ElectionTiming, LeaderElector, lease_api
from headroom.router.app.server import RouterServer
from tests.router.routercases import router_config

pytestmark = [pytest.mark.kube, pytest.mark.timeout(1800)]  # the first use builds the API server

NAMESPACE = "routers"
FAST = ElectionTiming(lease_s=3.0, renew_deadline_s=2.0, retry_s=0.2)


@pytest.fixture(scope="module")
def admin(kube_api):
    api = kube_api.admin
    client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
    return api


def eventually(condition, timeout_s: float = 10.0) -> float:
    """Seconds until ``condition()`` held."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, "the condition did not hold in time"
        time.sleep(0.05)
    return time.monotonic() - started


def replicas(admin, lease: str, n: int) -> list[LeaderElector]:
    return [LeaderElector(lease_api(NAMESPACE, lease, admin), f"router-{i}", FAST).start() for i in range(n)]


def test_one_of_three_replicas_leads_and_a_standby_takes_over_when_it_stops(admin):
    electors = replicas(admin, "one-leader", 3)
    try:
        eventually(lambda: sum(e.leading for e in electors) == 1)
        for _ in range(20):  # and stays one while they all keep trying
            assert sum(e.leading for e in electors) == 1
            time.sleep(0.1)
        (leader,) = [e for e in electors if e.leading]
        leader.stop()  # gives the lease up
        handover = eventually(lambda: sum(e.leading for e in electors) == 1)
        assert not leader.leading and handover < FAST.lease_s
        lease = client.CoordinationV1Api(admin).read_namespaced_lease("one-leader", NAMESPACE)
        (new,) = [e for e in electors if e.leading]
        assert lease.spec.holder_identity == new.identity and lease.spec.lease_transitions == 1
    finally:
        for elector in electors:
            elector.stop()


def test_a_lease_whose_holder_died_is_taken_once_it_has_not_been_renewed_for_its_duration(admin):
    stamp = datetime.datetime.now(datetime.UTC)
    client.CoordinationV1Api(admin).create_namespaced_lease(NAMESPACE, client.V1Lease(
        metadata=client.V1ObjectMeta(name="dead-holder"),
        spec=client.V1LeaseSpec(holder_identity="router-killed", acquire_time=stamp, renew_time=stamp,
                                lease_duration_seconds=3, lease_transitions=0)))
    (elector,) = replicas(admin, "dead-holder", 1)
    try:
        time.sleep(2.0)
        assert not elector.leading  # the holder's lease has not run out by this replica's clock yet
        eventually(lambda: elector.leading, timeout_s=5.0)
    finally:
        elector.stop()


def test_a_leader_that_cannot_reach_the_api_steps_down_at_its_renew_deadline(admin, kube_api):
    (elector,) = replicas(admin, "cut-off", 1)
    try:
        eventually(lambda: elector.leading)
        elector.api = lease_api(NAMESPACE, "cut-off", client.ApiClient(client.Configuration(
            host="https://127.0.0.1:1")))  # nothing listens there
        lost = eventually(lambda: not elector.leading)
        assert lost < FAST.renew_deadline_s + 1.0
    finally:
        elector.stop()


def test_of_two_routers_only_the_leader_is_ready_and_the_other_is_once_it_stops(admin, kube_api, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(kube_api.kubeconfig("admin")))
    routers = [RouterServer(router_config([], leaderElection=True, leaderNamespace=NAMESPACE, leaderLease="pair",
                                          identity=f"router-{i}"), from_env(KafkaSettings, {})) for i in range(2)]

    async def readiness(session) -> list[int]:
        statuses = []
        for router in routers:
            async with session.get(f"http://127.0.0.1:{router.http_port}/readyz") as response:
                statuses.append(response.status)
        return statuses

    async def scenario():
        for router in routers:
            await router.start()
        try:
            async with aiohttp.ClientSession() as session:
                while sorted(await readiness(session)) != [200, 503]:
                    await asyncio.sleep(0.1)
                leader = (await readiness(session)).index(200)
                await routers[leader].stop()
                standby = routers[1 - leader]
                while True:
                    async with session.get(f"http://127.0.0.1:{standby.http_port}/readyz") as response:
                        if response.status == 200:
                            return leader
                    await asyncio.sleep(0.1)
        finally:
            for router in routers:
                await router.stop()

    leader = asyncio.run(asyncio.wait_for(scenario(), timeout=30))
    lease = client.CoordinationV1Api(admin).read_namespaced_lease("pair", NAMESPACE)
    assert lease.spec.holder_identity in (None, f"router-{1 - leader}")  # released by the last one to stop
