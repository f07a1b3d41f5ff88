"""Telemetry to the real broker: records land with the prediction used; a broker outage loses nothing."""

import asyncio
import time
import uuid

import aiohttp
import pytest
from confluent_kafka import Consumer, TopicPartition

from headroom import kafka_topics
from headroom.contract.settings import from_env
from headroom.contract.telemetry import decode
from headroom.contract.topics import KafkaSettings, TopicSpec
from headroom.localkafka import broker
from headroom.localkafka.settings import BrokerSettings
from headroom.ports import free_port
from headroom.router.app.server import RouterServer
from tests.router.routercases import TablePredictor, router_config, wait_for
from tests.router.upstream import Upstream, upstreams

pytestmark = pytest.mark.kafka


def consume(bootstrap, topic, expected, timeout_s=30.0):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    records, deadline = [], time.monotonic() + timeout_s
    while len(records) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            records.append(decode(message.value()))
    for message in consumer.consume(100, timeout=1.0):  # anything beyond what was expected
        if message.error() is None:
            records.append(decode(message.value()))
    consumer.close()
    return records


async def send(port, requests):
    statuses = []
    async with aiohttp.ClientSession() as http:
        for path, headers, body in requests:
            async with http.post(f"http://127.0.0.1:{port}{path}", headers=headers, json=body) as response:
                await response.read()
                statuses.append(response.status)
    return statuses


OPT_OUT = {"x-prediction-based-scheduling-off": "true"}
MIXED = [
    ("/v1/completions", OPT_OUT, {"prompt": "plain", "max_tokens": 3}),
    ("/v1/completions", {}, {"prompt": "predicted", "max_tokens": 3}),
    ("/v1/chat/completions", {"x-slo-ttft-ms": "5000", "x-slo-tpot-ms": "100"},
     {"messages": [{"role": "user", "content": "slo stream"}], "max_tokens": 5, "stream": True}),
    ("/v1/completions", OPT_OUT, {"prompt": "plain stream", "max_tokens": 4, "stream": True}),
]


def test_records_land_in_kafka_with_the_prediction(kafka, fresh_topic):
    topic = fresh_topic("router-telemetry", 2)
    settings = from_env(KafkaSettings, {}, bootstrap_servers=kafka.bootstrap_servers, telemetry_topic=topic)

    async def scenario():
        async with upstreams(Upstream("a"), Upstream("b")) as servers:
            router = RouterServer(router_config([s.address for s in servers], telemetry=True), settings,
                                  predictor=TablePredictor(base=42.0, tpot=6.0, version=7))
            await router.start()
            assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
            statuses = await send(router.http_port, MIXED)
            await router.stop()
            return statuses, router
    statuses, router = asyncio.run(asyncio.wait_for(scenario(), 90))
    assert statuses == [200] * 4
    records = {r.request_id: r for r in consume(kafka.bootstrap_servers, topic, 4)}
    assert len(records) == 4 and router.telemetry.counts.delivered == 4
    by_flags = sorted((r.stream, r.predicted_ttft_ms is not None, r.slo_ttft_ms) for r in records.values())
    assert by_flags == [(False, False, None), (False, True, None), (True, False, None), (True, True, 5000.0)]
    slo = next(r for r in records.values() if r.slo_ttft_ms)
    assert (slo.predicted_ttft_ms, slo.predicted_tpot_ms, slo.model_versions, slo.output_tokens) == \
        (42.0, 6.0, {"ttft": 7, "tpot": 7}, 5)
    assert slo.ttft_ms is not None and slo.tpot_ms is not None and slo.slo_tpot_ms == 100.0


def test_broker_outage_keeps_routing_and_delivers_the_buffer_later(tmp_path):
    own = from_env(BrokerSettings, port=free_port(), controller_port=free_port(), state_dir=tmp_path / "kafka")
    broker.up(own)
    try:
        settings = from_env(KafkaSettings, {}, bootstrap_servers=own.bootstrap)
        kafka_topics.ensure_topics(settings, [TopicSpec(settings.telemetry_topic, 1, {})])

        async def scenario():
            async with upstreams(Upstream("a")) as servers:
                router = RouterServer(router_config([servers[0].address], telemetry=True), settings)
                await router.start()
                assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
                before = await send(router.http_port, MIXED)
                assert await wait_for(lambda: router.telemetry.counts.delivered == 4, timeout_s=30)
                await asyncio.to_thread(broker.down, own)
                during = await send(router.http_port, MIXED * 3)
                buffered = router.telemetry.buffered
                await asyncio.to_thread(broker.up, own)
                delivered = await wait_for(lambda: router.telemetry.counts.delivered == 16, timeout_s=60)
                await router.stop()
                return before, during, buffered, delivered, router
        before, during, buffered, delivered, router = asyncio.run(asyncio.wait_for(scenario(), 240))
        assert before == [200] * 4 and during == [200] * 12  # routing never stopped
        assert buffered == 12 and delivered
        assert (router.telemetry.counts.dropped, router.telemetry.counts.failed) == (0, 0)
        ids = [r.request_id for r in consume(own.bootstrap, settings.telemetry_topic, 16)]
        assert len(ids) == 16 and len(set(ids)) == 16  # all delivered, none twice
    finally:
        broker.down(own)
