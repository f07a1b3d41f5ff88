"""Replaying telemetry history from the real broker."""

import time

import polars as pl
import pytest
from confluent_kafka import Producer, TopicPartition

from headroom.backtest.replay import Range, consumer, read_telemetry
from headroom.contract.telemetry import encode
from headroom.contract.topics import KafkaSettings
from headroom.kafka_clients import admin
from tests.contract.records import valid_record

pytestmark = pytest.mark.kafka


def produce(bootstrap: str, topic: str, values: list[bytes], timestamp_ms: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, key=str(i % 7), value=value, timestamp=timestamp_ms)
        producer.poll(0)
    assert producer.flush(30) == 0


def wait_for_stable_end(kafka: KafkaSettings, topic: str, end: int) -> bool:
    """Whether partition 0's last stable offset reaches ``end`` within about ten seconds."""
    client = consumer(kafka)
    try:
        for _ in range(100):
            if client.get_watermark_offsets(TopicPartition(topic, 0), timeout=5)[1] >= end:
                return True
            time.sleep(0.1)
        return False
    finally:
        client.close()


def test_replay_reads_every_valid_record_and_reports_the_rest(kafka, fresh_topic):
    topic = fresh_topic("replay", partitions=3)
    values = [encode(valid_record(request_id=f"r{i}", prompt_tokens=i)) for i in range(30_000)]
    values[100] = b"not json"
    values[200] = encode(valid_record(request_id="neg")).replace(b'"tpot_ms":14.8', b'"tpot_ms":-1')
    produce(kafka.bootstrap_servers, topic, values, 1_000_000)

    replay = read_telemetry(kafka, topic)

    assert replay.read == 30_000
    assert replay.records.height == 29_998
    assert sorted(reason for _, _, reason in replay.rejected) == [
        "field 'tpot_ms' is a latency and must be within [0, 3600000] ms, got -1.0",
        "not valid JSON: Expecting value: line 1 column 1 (char 0)"]
    assert set(replay.records["request_id"]) == {f"r{i}" for i in range(30_000)} - {"r100", "r200"}
    assert replay.records.select(["partition", "offset"]).is_duplicated().sum() == 0


def test_time_range_selects_by_record_timestamp(kafka, fresh_topic):
    topic = fresh_topic("replay-range", partitions=2)
    produce(kafka.bootstrap_servers, topic, [encode(valid_record(request_id=f"old{i}")) for i in range(50)], 1_000)
    produce(kafka.bootstrap_servers, topic, [encode(valid_record(request_id=f"new{i}")) for i in range(70)], 5_000)

    recent = read_telemetry(kafka, topic, Range(start_ms=4_000))
    early = read_telemetry(kafka, topic, Range(end_ms=4_000))

    assert sorted(recent.records["request_id"]) == sorted(f"new{i}" for i in range(70))
    assert sorted(early.records["request_id"]) == sorted(f"old{i}" for i in range(50))


def test_replay_commits_no_consumer_offsets(kafka, fresh_topic):
    topic = fresh_topic("replay-nocommit")
    produce(kafka.bootstrap_servers, topic, [encode(valid_record(request_id="only"))], 1_000)
    read_telemetry(kafka, topic)
    client = admin(kafka)  # must outlive the future: a client freed first purges the answer
    groups = client.list_consumer_groups(request_timeout=30).result(timeout=60)
    assert not [g.group_id for g in groups.valid if g.group_id.startswith("headroom-replay-")]


def test_a_partition_ending_in_a_transaction_marker_is_read_to_its_end(kafka, fresh_topic):
    topic = fresh_topic("replay-txn")
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": f"txn-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, key=b"k", value=encode(valid_record(request_id=f"t{i}")), timestamp=1_000)
    producer.commit_transaction(30)
    # The commit markers reach the partition after commit_transaction returns, and a replay's end is the
    # last stable offset: wait (bounded) until the committed records are part of the topic's history.
    assert wait_for_stable_end(kafka, topic, 11)

    replay = read_telemetry(kafka, topic)

    assert sorted(replay.records["request_id"]) == sorted(f"t{i}" for i in range(10))


def test_workers_share_the_partitions_and_the_records_come_back_in_partition_and_offset_order(kafka, fresh_topic):
    topic = fresh_topic("replay-workers", partitions=3)
    values = [encode(valid_record(request_id=f"w{i}", prompt_tokens=i)) for i in range(3_000)]
    values[1234] = b"{}"
    produce(kafka.bootstrap_servers, topic, values, 1_000_000)
    counted = []

    replays = [read_telemetry(kafka, topic, workers=workers, progress=counted.append)
               for workers in (1, 2, 3, 8)]

    first = replays[0]
    assert first.records.height == 2_999 and first.read == 3_000 and len(first.rejected) == 1
    assert first.records.select(["partition", "offset"]).rows() == sorted(
        first.records.select(["partition", "offset"]).rows())
    for other in replays[1:]:
        assert other.records.equals(first.records)
        assert other.rejected == first.rejected
    assert sum(counted) == 4 * 3_000


def test_a_start_offset_applies_to_every_partition(kafka, fresh_topic):
    topic = fresh_topic("replay-offset", partitions=2)
    produce(kafka.bootstrap_servers, topic, [encode(valid_record(request_id=f"o{i}")) for i in range(40)], 1_000)

    replay = read_telemetry(kafka, topic, Range(start_offset=5))

    counts = replay.records.group_by("partition").agg(pl.len(), pl.col("offset").min()).sort("partition")
    everything = read_telemetry(kafka, topic).records.group_by("partition").len().sort("partition")
    assert counts["offset"].to_list() == [5, 5]
    assert counts["len"].to_list() == [n - 5 for n in everything["len"].to_list()]
