"""Compaction against a forger, on the real broker with compaction forced (``segment.ms`` 100 ms,
``min.cleanable.dirty.ratio`` 0.01, no compaction lag): whoever can write ``model-updates`` puts garbage, a
forged model, a genuinely signed older version and a tombstone under genuine models' keys. Once the log
cleaner has run, a reader that starts finds the older version, or nothing, where nobody repaired — and the
genuine newest version where a real worker (``headroom worker start``) was running, its guard having put each
model back. The readers that start afterwards are a real ``headroom models list`` and the worker's own reader.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import TopicPartition

from headroom import kafka_clients
from headroom.contract.signing import SigningKey, TrustedKeys
from headroom.contract.topics import MODEL_MESSAGE_MAX_BYTES, TopicSpec
from headroom.kafka_topics import ensure_topics
from headroom.model_topic import read_all, read_latest
from tests.keys import NEXT_KEY, TEST_KEY, write_public_key
from tests.predictor.models import message, train
from tests.streams.worker_process import WorkerProcess

pytestmark = [pytest.mark.kafka, pytest.mark.e2e, pytest.mark.timeout(600)]

FORCED_COMPACTION = {"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
                     "min.compaction.lag.ms": "0", "delete.retention.ms": "100",
                     "max.message.bytes": str(MODEL_MESSAGE_MAX_BYTES)}
KNOWN, UNKNOWN, DELETED = "pool-a/ttft/mean", "pool-c/ttft/mean", "pool-b/ttft/mean"
READERS = TrustedKeys([TEST_KEY.public_key, NEXT_KEY.public_key])  # pool-c's publisher signs with NEXT_KEY, which
# readers trust but the worker (signing with TEST_KEY) does not: the worker never holds pool-c, so nobody guards it


@pytest.fixture
def topics(kafka):
    """This test's telemetry topics, and a model topic whose cleaner runs as soon as it can."""
    tag = uuid.uuid4().hex[:8]
    settings = dataclasses.replace(kafka, telemetry_topic=f"telemetry-{tag}", dlq_topic=f"telemetry-dlq-{tag}",
                                   model_topic=f"model-updates-{tag}", telemetry_partitions=4)
    ensure_topics(settings, [TopicSpec(settings.model_topic, 1, FORCED_COMPACTION)])
    ensure_topics(settings)
    return settings


def genuine(kafka, versions, key=TEST_KEY) -> list[int]:
    """Publish genuinely signed models, ``(pool, version)`` each, as the worker does (signed with ``key``, under
    their model keys); the offsets the topic holds then."""
    producer = kafka_clients.producer(kafka, {"message.max.bytes": MODEL_MESSAGE_MAX_BYTES})
    for pool, version in versions:
        producer.produce(kafka.model_topic, key=f"{pool}/ttft/mean".encode(),
                         value=message(train(seed=version), version, pool_key=pool, key=key))
    assert producer.flush(30) == 0
    return offsets(kafka)


def offsets(kafka) -> list[int]:
    """The offsets the model topic holds now."""
    return [item.offset for item in read_all(kafka, READERS)]


def forge(kafka) -> None:
    """What a writer of the topic without the signing key can put under genuine keys, the replay last; in one
    batch, as a forger in a hurry sends it."""
    forged = message(train(seed=99), 99, key=None)
    producer = kafka_clients.producer(kafka, {"message.max.bytes": MODEL_MESSAGE_MAX_BYTES, "linger.ms": 500})
    for key, signer in ((KNOWN, TEST_KEY), (UNKNOWN, NEXT_KEY)):
        for value in (b"garbage" * 20, forged, SigningKey.generate().sign(forged),
                      message(train(seed=1), 1, pool_key=key.split("/")[0], key=signer)):  # the replay: genuine v1
            producer.produce(kafka.model_topic, key=key.encode(), value=value)
    producer.produce(kafka.model_topic, key=DELETED.encode(), value=None)
    assert producer.flush(30) == 0


def force_compaction(kafka, gone: list[int], timeout_s: float = 180.0) -> None:
    """Roll segments (a message under a key of its own, past segment.ms) until the cleaner has dropped every
    offset in ``gone``."""
    producer = kafka_clients.producer(kafka)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        producer.produce(kafka.model_topic, key=b"segment-roll", value=b"roll")
        producer.flush(10)
        if not set(gone) & set(offsets(kafka)):
            return
    raise AssertionError(f"the log cleaner did not run within {timeout_s:.0f} s (offsets {gone} still there)")


def models_list(kafka, tmp_path) -> str:
    """``headroom models list`` as a reader starting now runs it."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HEADROOM_")}
    keys = tmp_path / "keys"
    write_public_key(keys)
    write_public_key(keys, NEXT_KEY)
    environ.update(HEADROOM_KAFKA_BOOTSTRAP=kafka.bootstrap_servers, HEADROOM_TOPIC_MODELS=kafka.model_topic,
                   HEADROOM_MODEL_TRUSTED_KEYS=str(keys))
    done = subprocess.run([sys.executable, "-m", "headroom.cli.main", "models", "list"], env=environ,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_running_worker_keeps_each_model_it_knows_through_forgeries_and_compaction(topics, tmp_path):
    kafka = topics
    before = genuine(kafka, [("pool-a", 1), ("pool-a", 2), ("pool-b", 1)])
    worker = WorkerProcess(kafka, f"guard-{uuid.uuid4().hex[:6]}", tmp_path / "worker").start()
    try:
        worker.wait_for(lambda m: "owning telemetry partitions [0, 1, 2, 3]" in worker.log(), 120, "ownership")
        early = genuine(kafka, [("pool-c", 1), ("pool-c", 2)], key=NEXT_KEY)
        forge(kafka)
        worker.wait_for(lambda m: m.get('headroom_model_repairs_total{reason="replayed"}') == 1.0
                        and m.get('headroom_model_repairs_total{reason="tombstone"}') == 1.0, 60, "repairs")
        force_compaction(kafka, gone=before + early)
        repairs = {k: v for k, v in worker.metrics().items() if k.startswith("headroom_model_repairs_total")}
    finally:
        worker.stop()
    latest, rejected = read_latest(kafka, READERS)
    versions = {key: update.version for key, update in latest.items()}
    assert versions == {KNOWN: 2, DELETED: 1, UNKNOWN: 1}  # pool-c, which no worker guarded, fell back to v1
    assert repairs == {'headroom_model_repairs_total{reason="replayed"}': 1.0,
                       'headroom_model_repairs_total{reason="tombstone"}': 1.0}  # once per key, not per message
    assert "model pool-a/ttft/mean: the last message under its key was replayed; published v2 again" in worker.log()
    rows = {cells[1]: cells[2] for line in models_list(kafka, tmp_path).splitlines()
            if len(cells := [cell.strip() for cell in line.split("│")]) > 3}
    assert (rows[KNOWN], rows[DELETED], rows[UNKNOWN]) == ("2", "1", "1")
    low, _ = kafka_clients.consumer(kafka, "check").get_watermark_offsets(TopicPartition(kafka.model_topic, 0), 10)
    assert low >= 0 and not set(before) & set(offsets(kafka))  # the genuine originals are gone: compaction ran
