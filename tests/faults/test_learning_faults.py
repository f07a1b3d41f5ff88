"""Learning survives any record: poison pills, clock poisoning and version poisoning, on the real broker
with a real worker process, a real router and a real prediction server."""

from __future__ import annotations

import dataclasses
import hashlib
import random
import time
import uuid

import numpy as np
import pytest
from confluent_kafka import Producer

from headroom import kafka_topics
from headroom.contract.features import FEATURE_NAMES
from headroom.contract.settings import from_env
from headroom.contract.telemetry import encode, partition_key
from headroom.contract.topics import REASON_HEADER, SOURCE_HEADER, TopicSpec
from headroom.model_topic import read_latest
from headroom.predictor.client import PredictorClient
from headroom.predictor.server import PredictorServer
from headroom.predictor.settings import PredictorSettings
from tests.keys import TRUST
from tests.predictor.models import message, train
from tests.streams.test_pipeline_kafka import read_topic, send, wait_for_version
from tests.streams.worker_process import WorkerProcess
from tests.trainer.synthetic import synthetic_records

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

LEARN_FAST = {"HEADROOM_RETRAIN_INTERVAL": "2", "HEADROOM_RETRAIN_MIN_SAMPLES": "100"}


def valid_payloads(count: int, seed: int) -> list[dict]:
    records = synthetic_records(count, seed=seed, stream_fraction=1.0, start_ts=time.time(), rate_per_s=200.0)
    return [{"key": partition_key(r), "value": encode(r)} for r in records]


def letters_of(kafka) -> list[tuple[dict[str, bytes], bytes | None]]:
    return [(dict(m.headers() or []), m.value()) for m in read_topic(kafka, kafka.dlq_topic)]


def test_a_record_of_a_mebibyte_is_dead_lettered_once_and_learning_goes_on(pipeline_kafka, tmp_path):
    pill = b'{"v":1,"request_id":"' + b"x" * 1_000_000 + b'"}'
    producer = Producer({"bootstrap.servers": pipeline_kafka.bootstrap_servers, "message.max.bytes": 2_000_000})
    producer.produce(pipeline_kafka.telemetry_topic, value=pill, key=b"pool-a")
    assert producer.flush(30) == 0
    send(pipeline_kafka, valid_payloads(400, seed=1))
    worker = WorkerProcess(pipeline_kafka, f"pill-{uuid.uuid4().hex[:8]}", tmp_path, extra_env=LEARN_FAST).start()
    try:
        wait_for_version(pipeline_kafka, "pool-a/ttft/mean", 0, worker, timeout_s=120)
        worker.wait_for(lambda m: m.get("headroom_telemetry_ingested_total", 0) >= 400, 60, "every valid record")
    finally:
        worker.kill()
    restarted = WorkerProcess(pipeline_kafka, worker.app_id, tmp_path).start()  # no record is sent twice
    try:
        send(pipeline_kafka, valid_payloads(50, seed=2))
        restarted.wait_for(lambda m: m.get("headroom_telemetry_ingested_total", 0) >= 1, 90, "the next records")
    finally:
        restarted.stop()
    (headers, value), = letters_of(pipeline_kafka)
    assert b"over the 16384-byte limit" in headers[REASON_HEADER]
    assert headers[SOURCE_HEADER].startswith(pipeline_kafka.telemetry_topic.encode())
    assert int(headers["headroom-original-bytes"]) == len(pill)
    assert headers["headroom-original-sha256"].decode() == hashlib.sha256(pill).hexdigest()
    assert value is not None and pill.startswith(value) and len(value) < len(pill)


def test_a_dead_letter_the_topic_refuses_is_retried_smaller_counted_and_never_fatal(kafka, tmp_path):
    tag = uuid.uuid4().hex[:8]
    settings = dataclasses.replace(kafka, telemetry_topic=f"telemetry-{tag}", dlq_topic=f"telemetry-dlq-{tag}",
                                   model_topic=f"model-updates-{tag}", telemetry_partitions=2)
    kafka_topics.ensure_topics(settings, [TopicSpec(settings.dlq_topic, 1, {"max.message.bytes": "2048"})])
    kafka_topics.ensure_topics(settings)
    # under the record limit, over what the dead-letter topic takes even compressed (random bytes do not shrink)
    garbage = b"\xff" + random.Random(7).randbytes(8000)
    send(settings, [{"value": garbage, "key": b"pool-a"}] + valid_payloads(400, seed=3))
    worker = WorkerProcess(settings, f"refused-{tag}", tmp_path, extra_env=LEARN_FAST).start()
    try:
        wait_for_version(settings, "pool-a/ttft/mean", 0, worker, timeout_s=120)
        worker.wait_for(lambda m: m.get("headroom_telemetry_ingested_total", 0) >= 400, 60, "all records")
        worker.wait_for(lambda m: sum(v for k, v in m.items()
                                      if k.startswith("headroom_telemetry_dead_letter_failures_total")) >= 1,
                        60, "the dead-letter topic refusing the letter (at the partition's next flush)")
        deadline = time.monotonic() + 60  # written again, smaller, at a later flush of the running worker
        while not letters_of(settings) and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        worker.stop()
    assert "dead letter" in worker.log()
    (headers, value), = letters_of(settings)
    assert b"not UTF-8" in headers[REASON_HEADER] and int(headers["headroom-original-bytes"]) == len(garbage)
    assert not value  # the reason, source, size and checksum travel without the bytes the topic refused


def test_a_record_from_the_far_future_is_dead_lettered_and_the_window_clock_keeps_to_the_wall_clock(
        pipeline_kafka, tmp_path):
    now = time.time()
    honest = synthetic_records(1, seed=4, stream_fraction=1.0, start_ts=now)[0]
    future = dataclasses.replace(honest, request_id="from-the-future", arrival_ts=now + 1e7, dispatch_ts=now + 1e7,
                                 completion_ts=now + 1e7 + 1.0)
    send(pipeline_kafka, [{"key": partition_key(future), "value": encode(future)}] + valid_payloads(400, seed=5))
    worker = WorkerProcess(pipeline_kafka, f"clock-{uuid.uuid4().hex[:8]}", tmp_path, extra_env=LEARN_FAST).start()
    try:
        update = wait_for_version(pipeline_kafka, "pool-a/ttft/mean", 0, worker, timeout_s=120)
        assert update.window_stats["newest_ts"] < now + 60
    finally:
        worker.stop()
    (headers, value), = letters_of(pipeline_kafka)
    assert value == encode(future) and b"ahead of the consumer's clock" in headers[REASON_HEADER]


def test_a_model_version_out_of_bounds_or_jumping_ahead_is_rejected_and_the_next_honest_one_serves(pipeline_kafka,
                                                                                                    trusted_keys):
    booster = train(trees=5)
    producer = Producer({"bootstrap.servers": pipeline_kafka.bootstrap_servers, "message.max.bytes": 10_000_000})
    for version in (1, 2**64, 2**53 - 1, 10**9, 2):  # out of range, then two jumps far ahead of the live v1
        producer.produce(pipeline_kafka.model_topic, key=b"pool-a/ttft/mean", value=message(booster, version))
    assert producer.flush(30) == 0
    settings = from_env(PredictorSettings, {"HEADROOM_MODEL_TRUSTED_KEYS": trusted_keys}, host="127.0.0.1", port=0,
                        metrics_port=-1)
    server = PredictorServer(settings, pipeline_kafka).start()
    client = PredictorClient([server.address], timeout_seconds=5.0)
    try:
        assert server.tailer.wait_ready(60)
        answer = client.predict("pool-a", np.zeros((3, len(FEATURE_NAMES)), dtype=np.float32))
        assert answer.versions == {("ttft", "mean"): 2}
        assert server.runtime.rejected["version"] == 3
    finally:
        client.close()
        server.stop(0)
    latest, rejected = read_latest(pipeline_kafka, TRUST)  # the worker's warm start follows the same rule
    assert latest["pool-a/ttft/mean"].version == 2 and len(rejected) == 3
