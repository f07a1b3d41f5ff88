"""llm-d's training API over SASL_SSL as its own principal (``headroom-llmd-training``): its samples reach
``telemetry``, the ones it refuses the dead-letter topic, and it lists models from ``model-updates`` — the
Kafka security settings of every client, and no grant beyond those three topics; its own listener speaks
TLS with the listener settings of every headroom server."""

from __future__ import annotations

import json
import ssl
import time
import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from headroom import kafka_clients
from headroom.contract.settings import from_env
from headroom.contract.signing import SigningSettings
from headroom.contract.telemetry import decode
from headroom.contract.tls import ServerTls
from headroom.contract.topics import KafkaSettings
from headroom.llmd.settings import TrainingApiSettings
from headroom.llmd.training_server import TrainingServer
from tests.llmd.http import call
from tests.llmd.test_training_api import ENTRY

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]


def values_keyed(kafka: KafkaSettings, topic: str, key: bytes, timeout_s: float = 30.0) -> list[bytes]:
    """The values of ``topic``'s records keyed ``key``, read to the topic's end."""
    consumer = kafka_clients.consumer(kafka, "headroom-tests")
    try:
        found = kafka_clients.wait_for_partitions(consumer, topic, 10.0)
        ends = {p: high for p, (low, high) in kafka_clients.watermarks(consumer, topic, found, 10.0).items()
                if high > low}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        values, deadline = [], time.monotonic() + timeout_s
        while ends and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            if message.key() == key:
                values.append(message.value())
            if message.offset() + 1 >= ends.get(message.partition(), 0):
                ends.pop(message.partition(), None)
        assert not ends, f"could not read {topic} to its end"
        return values
    finally:
        consumer.close()


def test_the_training_api_as_its_own_principal_over_sasl_ssl(secure_kafka, trusted_keys, pki):
    pool = f"llmd-{uuid.uuid4().hex[:8]}"
    settings = from_env(TrainingApiSettings, {}, host="127.0.0.1", port=0, pool_key=pool,
                        signing=SigningSettings(trusted_keys=trusted_keys),
                        tls=ServerTls(cert_file=pki.server[0], key_file=pki.server[1]))
    server = TrainingServer(settings, secure_kafka.client("headroom-llmd-training")).start()
    try:
        base, context = f"https://127.0.0.1:{server.port}", ssl.create_default_context(cafile=str(pki.ca))
        deadline = time.monotonic() + 60
        while call(base, "/readyz", context=context)[0] != 200:  # the model shelf has read model-updates to its end
            assert time.monotonic() < deadline, "the training API did not read model-updates"
            time.sleep(0.2)
        status, body = call(base, "/add_training_data_bulk", {"entries": [ENTRY, dict(ENTRY, actual_ttft_ms=0.0)]},
                            context=context)
        assert status == 202 and (body["telemetry"], body["dead_lettered"]) == (1, 1)
        while call(base, "/data/status", context=context)[1]["telemetry"]["delivered"] < 1:
            assert time.monotonic() < deadline + 30, "the sample was not delivered"
            time.sleep(0.2)
        assert call(base, "/data/status", context=context)[1]["telemetry"]["failed"] == 0
    finally:
        server.stop()
    assert server.notices.failed == 0
    admin = secure_kafka.client("admin")
    [record] = [decode(value) for value in values_keyed(admin, admin.telemetry_topic, pool.encode())]
    assert (record.pool_key, record.ttft_ms, record.prompt_tokens) == (pool, 150.0, 900)
    [letter] = values_keyed(admin, admin.dlq_topic, pool.encode())
    assert json.loads(letter)["actual_ttft_ms"] == 0.0
