"""The model-topic reader against the real broker: what follow() yields, and messages that are not updates."""

import time

import pytest

from headroom import kafka_clients
from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.model_update import encode_update, make_update
from headroom.model_topic import CAUGHT_UP, follow, read_all, read_latest
from tests.keys import TEST_KEY, TRUST

pytestmark = pytest.mark.kafka


def _update(version: int) -> bytes:
    return TEST_KEY.sign(encode_update(make_update(
        model=b'{"learner": {}}', version=version, pool_key="pool-a", target="ttft", objective="mean",
        feature_schema=FEATURE_SCHEMA, model_format="json", created_at=1_700_000_000.0)))


def test_follow_yields_what_is_there_then_caught_up_then_what_arrives(pipeline_kafka):
    producer = kafka_clients.producer(pipeline_kafka)
    producer.produce(pipeline_kafka.model_topic, key=b"pool-a/ttft/mean", value=_update(1))
    producer.flush(10)
    seen: list[object] = []
    deadline = time.monotonic() + 30
    for item in follow(pipeline_kafka, poll_s=0.2):
        if item is None:
            assert time.monotonic() < deadline, f"only {seen} within 30 s"
            continue
        seen.append(item if item is CAUGHT_UP else item.offset())
        if item is CAUGHT_UP:
            producer.produce(pipeline_kafka.model_topic, key=b"pool-a/ttft/mean", value=_update(2))
            producer.flush(10)
        if len(seen) == 3:
            break
    assert seen == [0, CAUGHT_UP, 1]


def test_an_empty_topic_is_caught_up_at_once(pipeline_kafka):
    started = time.monotonic()
    assert read_all(pipeline_kafka, TRUST, timeout_s=20) == []
    assert time.monotonic() - started < 15


def test_a_tombstone_is_reported_not_fatal(pipeline_kafka):
    producer = kafka_clients.producer(pipeline_kafka)
    producer.produce(pipeline_kafka.model_topic, key=b"pool-a/ttft/mean", value=_update(1))
    producer.produce(pipeline_kafka.model_topic, key=b"pool-a/ttft/mean", value=None)
    producer.flush(10)
    latest, rejected = read_latest(pipeline_kafka, TRUST)
    assert {key: update.version for key, update in latest.items()} == {"pool-a/ttft/mean": 1}
    assert [(item.offset, item.error) for item in rejected] == [(1, "a tombstone: the message has no value")]
