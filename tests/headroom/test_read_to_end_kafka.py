"""Reading partitions to their end on the real broker: a plain topic up to its end offsets (from where its
retention left it, nothing past the ends asked for), and a transactional one read committed up to its
end-of-partition events (its last offset is a commit marker)."""

import json
import uuid

import pytest
from confluent_kafka import TopicPartition

from headroom.contract.topics import TopicSpec
from headroom.kafka_clients import admin, consumer, producer, read_to_end, until_ends
from headroom.kafka_topics import ensure_topics
from headroom.streams.state_topic import read_state

pytestmark = pytest.mark.kafka


def topic_of(kafka, prefix: str, partitions: int, messages: int, written: int = 1) -> str:
    """A new topic of ``partitions`` partitions holding the values 0, 1, ... ``messages - 1``, value i on partition
    ``i % written``."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, [TopicSpec(topic, partitions, {})])
    sender = producer(kafka)
    for i in range(messages):
        sender.produce(topic, value=str(i).encode(), partition=i % written)
    sender.flush(10)
    return topic


def test_read_to_end_reads_every_partition_up_to_the_end_offsets_of_the_call(kafka):
    topic = topic_of(kafka, "to-end", 3, 30, written=2)  # partition 2 stays empty
    messages = read_to_end(kafka, topic, timeout_s=30)
    assert sorted(int(m.value()) for m in messages) == list(range(30))
    assert [int(m.value()) for m in messages if m.partition() == 1] == list(range(1, 30, 2))  # in order


def test_read_to_end_starts_where_the_partition_starts_now_after_records_were_deleted(kafka):
    topic = topic_of(kafka, "trimmed", 1, 10)
    client = admin(kafka)
    [deleted] = client.delete_records([TopicPartition(topic, 0, 5)]).values()
    assert deleted.result(10).low_watermark == 5
    assert [int(m.value()) for m in read_to_end(kafka, topic, timeout_s=30)] == list(range(5, 10))


def test_until_ends_yields_nothing_past_the_end_of_a_partition(kafka):
    topic = topic_of(kafka, "ends", 2, 10)  # all on partition 0
    client = consumer(kafka, "ends", {"enable.partition.eof": True})
    try:
        read = [(m.partition(), m.offset()) for m in until_ends(client, topic, {0: 5, 1: None}, 30)]
    finally:
        client.close()
    assert read == [(0, offset) for offset in range(5)]


def test_read_state_sees_only_committed_entries_and_stops_at_the_commit_markers(kafka):
    topic = f"state-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, [TopicSpec(topic, 2, {"cleanup.policy": "compact"})])
    writer = producer(kafka, {"transactional.id": f"writer-{topic}"})
    writer.init_transactions(10)
    transactions = [({"a": b"1", "b": b"1"}, {"d": b"1"}, True),  # per partition: key -> value (None: delete)
                    ({"c": b"2"}, {"d": None}, False),
                    ({"a": b"3", "b": None}, {}, True)]
    for first, second, commit in transactions:
        writer.begin_transaction()
        for partition, entries in enumerate((first, second)):
            for key, value in entries.items():
                writer.produce(topic, key=json.dumps(key).encode(), value=value, partition=partition)
        if commit:
            writer.commit_transaction(10)
        else:
            writer.flush(10)
            writer.abort_transaction(10)
    assert read_state(kafka, topic, [0, 1], timeout_s=30) == {"a": b"3", "d": b"1"}
    assert read_state(kafka, topic, [1], timeout_s=30) == {"d": b"1"}
    assert read_state(kafka, topic, [], timeout_s=30) == {}
