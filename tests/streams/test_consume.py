"""The consuming loop on the real broker: telemetry read in batches, dead letters and window changes written in
the owned partition's transactions."""

import asyncio
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from headroom.contract.telemetry import encode
from headroom.contract.topics import REASON_HEADER, SOURCE_HEADER
from headroom.kafka_topics import ensure_topics
from headroom.streams.app import create_topology
from headroom.streams.reader import Delivery
from headroom.streams.settings import PipelineSettings
from headroom.streams.state_topic import state_spec, state_topic
from headroom.trainer.live import LiveModels
from tests.contract.records import recent_record
from tests.keys import TEST_KEY, TRUST

pytestmark = pytest.mark.kafka


def dead_letters(kafka, expected: int) -> list[tuple[bytes, dict[str, bytes]]]:
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"t-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(kafka.dlq_topic, 0, 0)])
    found = []
    for _ in range(40):
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            found.append((message.value(), dict(message.headers() or [])))
        if len(found) >= expected:
            break
    consumer.close()
    return found


def read_all(kafka, topic: str, partition: int) -> list[tuple[bytes, bytes]]:
    """The committed messages of one partition, up to its end."""
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"t-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, partition, 0)])
    found = []
    for _ in range(40):
        message = consumer.poll(0.5)
        if message is None:
            continue
        if message.error():
            break  # the end of the partition
        found.append((message.key(), message.value()))
    consumer.close()
    return found


def run_loop(pipeline, partitions: set[int], until) -> list[dict[int, int]]:
    """Drive the pipeline's loop over ``partitions`` until ``until()``; returns what :meth:`flush` wrote."""
    written: list[dict[int, int]] = []

    async def drive():
        app, loop = pipeline.app, pipeline.loop
        app.finalize()
        task = asyncio.ensure_future(loop.run())
        try:
            await asyncio.to_thread(pipeline.ownership.fence, partitions)
            pipeline.ownership.open()
            await loop.own(partitions)
            for _ in range(600):  # at most 30 s
                if until():
                    break
                await asyncio.sleep(0.05)
            written.append(await loop.flush(force=True))
        finally:
            task.cancel()
            await loop.reader.close()

    event_loop = pipeline.app.loop
    try:
        event_loop.run_until_complete(asyncio.wait_for(drive(), 90))
    finally:
        event_loop.run_until_complete(event_loop.shutdown_asyncgens())
        event_loop.close()
        pipeline.app.consumer._thread.thread_loop.close()  # the consumer thread's loop, never started here
    return written


def test_bad_records_go_to_the_dead_letter_topic_with_reason_and_original_bytes(pipeline_kafka, tmp_path):
    settings = PipelineSettings(app_id=f"consume-{uuid.uuid4().hex[:8]}", data_dir=tmp_path, flush_interval_s=60.0)
    pipeline = create_topology(pipeline_kafka, settings, LiveModels(), TEST_KEY, TRUST)
    changelog_topic = state_topic(settings.app_id)
    ensure_topics(pipeline_kafka, [state_spec(settings.app_id, pipeline_kafka.telemetry_partitions)])
    garbage = [b"{not json", encode(recent_record(kv_cache_usage=1.5)),
               encode(recent_record()).replace(b'"num_waiting":2', b'"num_waiting":"2"')]
    producer = Producer({"bootstrap.servers": pipeline_kafka.bootstrap_servers})
    for value in [garbage[0], encode(recent_record()), *garbage[1:]]:
        producer.produce(pipeline_kafka.telemetry_topic, value=value, partition=0)
    producer.produce(pipeline_kafka.telemetry_topic, value=encode(recent_record()), partition=1)  # not owned
    assert producer.flush(30) == 0

    written = run_loop(pipeline, {0}, lambda: pipeline.ingestor.windows.high_water.get(0) == 3)

    letters = dead_letters(pipeline_kafka, len(garbage))
    assert [value for value, _ in letters] == garbage
    reasons = [headers[REASON_HEADER].decode() for _, headers in letters]
    assert "not valid JSON" in reasons[0] and "kv_cache_usage" in reasons[1] and "num_waiting" in reasons[2]
    assert [headers[SOURCE_HEADER].rsplit(b"/", 2)[1:] for _, headers in letters] == [[b"0", b"0"], [b"0", b"2"], [b"0", b"3"]]
    assert pipeline.ingestor.windows.size(("h100/llama3-8b", "ttft")) == 1
    assert pipeline.ingestor.windows.high_water == {0: 3}
    assert written == [{0: 4}]
    changelog = read_all(pipeline_kafka, changelog_topic, 0)
    assert changelog[-1] == (b'"hwm:0"', b"3") and len(changelog) == 3  # ttft and tpot strata, then the mark


def test_records_of_partitions_the_worker_does_not_own_are_left_alone(pipeline_kafka, tmp_path):
    settings = PipelineSettings(app_id=f"consume-{uuid.uuid4().hex[:8]}", data_dir=tmp_path)
    pipeline = create_topology(pipeline_kafka, settings, LiveModels(), TEST_KEY, TRUST)
    pipeline.loop.owned = frozenset({1})
    pipeline.loop.process([Delivery(0, 7, None, encode(recent_record())), Delivery(1, 3, None, encode(recent_record()))])
    assert pipeline.ingestor.windows.high_water == {1: 3}
    assert pipeline.ingestor.windows.size(("h100/llama3-8b", "ttft")) == 1
    pipeline.app.loop.close()
