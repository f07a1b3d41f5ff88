"""Kafka clients, made in one place: every confluent-kafka consumer, producer and admin client of headroom.

Each is built from :class:`~contract.topics.KafkaSettings` (how to reach and authenticate to the brokers,
:func:`client_config`, with the security options of :mod:`headroom.kafka_auth`) with the options of its role
laid over. Consumers made here never join a shared group: each gets a group id of its own and is assigned
partitions directly, so no reader moves another's offsets. Producers send a keyed record where Java clients
would (:data:`contract.partitions.PARTITIONER`), so a pool's telemetry lands on its
:func:`~contract.partitions.home_partition`.

:func:`partitions` and :func:`watermarks` read a topic's partitions and offsets, waiting a little for a
topic or a partition leader that was created just now; :func:`read_to_end` reads a whole topic as it is now,
:func:`until_ends` partitions up to their ends.
:func:`librdkafka_logger` is the logger a client hands librdkafka's own log lines to, with the notes about a
broker still starting (which librdkafka retries by itself) lowered to debug.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from headroom.contract.partitions import PARTITIONER
from headroom.contract.topics import KafkaSettings
from headroom.kafka_auth import librdkafka_options

# librdkafka's notes about a broker that is still starting up, which it retries by itself
TRANSIENT = ("Coordinator load in progress", "Coordinator not available")


class _TransientToDebug(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG and any(note in record.getMessage() for note in TRANSIENT):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def librdkafka_logger(name: str) -> logging.Logger:
    """The logger ``<name>.librdkafka``, for a client's ``logger`` option, with transient notes at debug level."""
    logger = logging.getLogger(f"{name}.librdkafka")
    if not any(isinstance(f, _TransientToDebug) for f in logger.filters):
        logger.addFilter(_TransientToDebug())
    return logger


def client_config(kafka: KafkaSettings) -> dict[str, Any]:
    """What every client needs to reach and authenticate to the brokers."""
    return {"bootstrap.servers": kafka.bootstrap_servers, **librdkafka_options(kafka.security)}


def consumer(kafka: KafkaSettings, group_prefix: str, options: Mapping[str, Any] | None = None) -> Consumer:
    """A consumer in a group of its own (``<group_prefix>-<random>``) that never commits unless ``options`` say."""
    return Consumer({**client_config(kafka), "group.id": f"{group_prefix}-{uuid.uuid4().hex}",
                     "enable.auto.commit": False, **(options or {})})


def group_consumer(kafka: KafkaSettings, group_id: str, options: Mapping[str, Any] | None = None) -> Consumer:
    """A consumer that commits its offsets to ``group_id`` (for lag tools) when its owner says so."""
    return Consumer({**client_config(kafka), "group.id": group_id, "enable.auto.commit": False, **(options or {})})


def producer(kafka: KafkaSettings, options: Mapping[str, Any] | None = None) -> Producer:
    return Producer({**client_config(kafka), "partitioner": PARTITIONER, **(options or {})})


def admin(kafka: KafkaSettings, options: Mapping[str, Any] | None = None) -> AdminClient:
    return AdminClient({**client_config(kafka), "socket.timeout.ms": 5000, **(options or {})})


def partitions(client: Consumer, topic: str, timeout_s: float) -> list[int] | None:
    """The partitions of ``topic`` in order, or None while the topic is not (yet) in the brokers' metadata."""
    metadata = client.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if metadata is None or metadata.error is not None or not metadata.partitions:
        return None
    return sorted(metadata.partitions)


def wait_for_partitions(client: Consumer, topic: str, timeout_s: float) -> list[int]:
    """The partitions of ``topic``, waiting up to ``timeout_s`` for a topic created just now to show up."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = partitions(client, topic, timeout_s)
        if found is not None:
            return found
        if time.monotonic() > deadline:
            metadata = client.list_topics(topic, timeout=timeout_s).topics.get(topic)
            raise KafkaException(metadata.error if metadata is not None else f"topic {topic!r} is unknown")
        time.sleep(0.2)


def watermarks(client: Consumer, topic: str, partition_ids: list[int], timeout_s: float) -> dict[int, tuple[int, int]]:
    """Low and high offsets of each partition, waiting up to ``timeout_s`` for the leader of a new partition."""
    deadline = time.monotonic() + timeout_s
    out = {}
    for partition in partition_ids:
        while True:
            try:
                out[partition] = client.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    return out


def read_to_end(kafka: KafkaSettings, topic: str, timeout_s: float = 60.0) -> list[Message]:
    """Every message of ``topic`` (all partitions, each in order) up to its end offsets when called; errors the
    consumer reports on the way are skipped."""
    client = consumer(kafka, "headroom-reader", {"fetch.max.bytes": 64 << 20, "enable.partition.eof": True})
    try:
        found = wait_for_partitions(client, topic, 10.0)
        ends = {p: high for p, (low, high) in watermarks(client, topic, found, 10.0).items() if high > low}
        return [m for m in until_ends(client, topic, ends, timeout_s) if not m.error()]
    finally:
        client.close()


def until_ends(client: Consumer, topic: str, ends: Mapping[int, int | None], timeout_s: float) -> Iterator[Message]:
    """The messages (and the errors reported on the way) of the partitions of ``topic`` that ``ends`` lists, read
    from where each starts now (its low watermark, wherever retention or deleted records moved it) until each is
    at its end: its end-of-partition event (the consumer must have ``enable.partition.eof`` set), or the message
    before its end offset in ``ends`` (None: the event only).
    A partition written in transactions may end at a commit marker no message stands at: the event ends it.
    Raises TimeoutError if that takes over ``timeout_s``."""
    remaining = dict(ends)
    if not remaining:
        return
    client.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in remaining])
    deadline = time.monotonic() + timeout_s
    while remaining:
        if time.monotonic() > deadline:
            raise TimeoutError(f"reading partitions {sorted(remaining)} of {topic!r} to their end took over "
                               f"{timeout_s} s")
        for message in client.consume(10_000, 0.5):
            partition, error = message.partition(), message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                remaining.pop(partition, None)
                continue
            if error is None and _past_end(message, remaining):  # the rest of a batch, or a later arrival
                remaining.pop(partition, None)
                continue
            yield message
            end = remaining.get(partition)
            if error is None and end is not None and message.offset() + 1 >= end:
                del remaining[partition]


def _past_end(message: Message, remaining: Mapping[int, int | None]) -> bool:
    """Whether ``message`` is of a partition that ended already, or at or past its end offset."""
    if message.partition() not in remaining:
        return True
    end = remaining[message.partition()]
    return end is not None and message.offset() >= end
