"""Three prediction server processes behind one router: calls are spread over all three, and when one is
killed (SIGKILL) under load, no request fails and every decision keeps its predictions."""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import threading
import urllib.request

import aiohttp
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headroom.contract.model_update import model_key
from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.demo.processes import Supervisor
from headroom.predictor.server import SERVICE_NAME
from headroom.router.app.server import RouterServer
from tests.conftest import free_port
from tests.predictor.models import message, train
from tests.predictor.test_kafka_e2e import publish
from tests.router.routercases import router_config, wait_for
from tests.router.upstream import Upstream, upstreams

pytestmark = [pytest.mark.kafka, pytest.mark.e2e, pytest.mark.timeout(240)]

PREDICT = {"x-prediction-based-scheduling": "true"}
HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")  # one port on three addresses, as pods behind a Service


def serving(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME),
                                                              timeout=1)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def calls_served(host: str, metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://{host}:{metrics_port}/metrics", timeout=2) as response:
        text = response.read().decode()
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.startswith('headroom_predictor_requests_total{code="OK"}'))


def test_one_of_three_prediction_servers_killed_under_load_costs_no_request_and_no_prediction(
        kafka, fresh_topic, tmp_path, trusted_keys):
    topic = fresh_topic("model-updates", config={"cleanup.policy": "compact"})
    models = dataclasses.replace(kafka, model_topic=topic)
    publish(models, topic, *[(model_key("default", t, "mean"), message(train(t), 1, pool_key="default", target=t))
                             for t in ("ttft", "tpot")])
    port, metrics_ports = free_port(), [free_port() for _ in HOSTS]
    supervisor = Supervisor(tmp_path / "logs", env={"HEADROOM_KAFKA_BOOTSTRAP": kafka.bootstrap_servers,
                                                    "HEADROOM_TOPIC_MODELS": topic,
                                                    "HEADROOM_MODEL_TRUSTED_KEYS": trusted_keys})
    try:
        predictors = []
        for host, metrics_port in zip(HOSTS, metrics_ports):
            supervisor.env.update({"HEADROOM_PREDICTOR_HOST": host, "HEADROOM_PREDICTOR_PORT": str(port),
                                   "HEADROOM_PREDICTOR_METRICS_PORT": str(metrics_port)})
            predictors.append(supervisor.start(f"predictor-{host}", ["predictor", "serve"],
                                               lambda host=host: serving(f"{host}:{port}")))
        victim = predictors[1]
        survivors = [(h, p) for h, p in zip(HOSTS, metrics_ports) if h != HOSTS[1]]
        statuses, served_before, decisions, fallbacks = asyncio.run(asyncio.wait_for(load_through_router(
            ",".join(f"{host}:{port}" for host in HOSTS), lambda: victim.process.send_signal(signal.SIGKILL),
            lambda: [calls_served(h, p) for h, p in zip(HOSTS, metrics_ports)]), 180))
        served_after = [calls_served(h, p) for h, p in survivors]
        assert victim.process.wait(10) == -signal.SIGKILL
    finally:
        supervisor.stop()
    assert len(statuses) > 100 and set(statuses) == {200}, statuses  # no client-visible error
    assert all(n > 0 for n in served_before), served_before  # all three took calls
    assert all(after > before for after, before in zip(served_after, served_before[::2]))  # the others took over
    assert decisions == {"predicted": len(statuses)} and fallbacks == 0  # every decision had its predictions


async def load_through_router(addresses: str, kill, served):
    """Eight clients send requests for a while; ``kill`` runs a third of the way through."""
    async with upstreams(Upstream("a"), Upstream("b")) as servers:
        router = RouterServer(router_config([s.address for s in servers], predictor="remote",
                                            predictorAddresses=addresses, predictorTimeoutS=1.0),
                              from_env(KafkaSettings, {}))
        await router.start()
        try:
            assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
            url = f"http://127.0.0.1:{router.http_port}/v1/completions"
            statuses: list[int] = []
            done = threading.Event()

            async def client(http):
                while not done.is_set():
                    async with http.post(url, headers=PREDICT, json={"prompt": "p", "max_tokens": 2}) as response:
                        await response.read()
                        statuses.append(response.status)

            async with aiohttp.ClientSession() as http:
                clients = [asyncio.create_task(client(http)) for _ in range(8)]
                await asyncio.sleep(2.0)
                served_before = await asyncio.to_thread(served)
                kill()
                answered_at_kill = len(statuses)
                await asyncio.sleep(4.0)
                done.set()
                await asyncio.gather(*clients)
            assert len(statuses) > answered_at_kill  # requests went on being served after the kill
            metrics = router.metrics
            decisions = {profile: value for profile in ("predicted", "heuristic")
                         if (value := metrics.decisions.labels(profile)._value.get())}
            fallbacks = sum(sample.value for counter in (metrics.heuristic_decisions, metrics.partial_fallbacks)
                            for family in counter.collect() for sample in family.samples
                            if sample.name.endswith("_total"))
        finally:
            await router.stop()
    return statuses, served_before, decisions, fallbacks
