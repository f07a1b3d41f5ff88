"""Telemetry through the real broker: everything produced arrives exactly once and decodes to the same value."""

import dataclasses
import time

import pytest
from confluent_kafka import Consumer, Producer

from contract.telemetry import decode, encode
from tests.contract.records import valid_record

pytestmark = pytest.mark.kafka
COUNT = 20_000


def test_twenty_thousand_records_arrive_exactly_once(kafka, fresh_topic):
    topic = fresh_topic("roundtrip", partitions=4)
    sent = {}
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5})
    failures = []
    for i in range(COUNT):
        record = dataclasses.replace(valid_record(), request_id=f"req-{i}", server_id=f"server-{i % 16}",
                                     prompt_tokens=i % 4000, e2e_ms=1000.0 + i)
        sent[record.request_id] = record
        producer.produce(topic, key=record.server_id, value=encode(record),
                         on_delivery=lambda err, _msg: err and failures.append(err))
        producer.poll(0)
    assert producer.flush(30) == 0
    assert failures == []

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"check-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    received = {}
    duplicates = 0
    deadline = time.monotonic() + 60
    try:
        while len(received) < COUNT and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=1.0):
                assert message.error() is None
                record = decode(message.value())
                duplicates += record.request_id in received
                received[record.request_id] = record
    finally:
        consumer.close()
    assert duplicates == 0
    assert received == sent
