"""Kafka clients, made in one place: every confluent-kafka consumer, producer and admin client of headroom.

Each is built from :class:`~contract.topics.KafkaSettings` (how to reach and authenticate to the brokers,
:func:`client_config`, with the security options of :mod:`headroom.kafka_auth`) with the options of its role
laid over. Consumers made here never join a shared group: each gets a group id of its own and is assigned
partitions directly, so no reader moves another's offsets. Producers send a keyed record where Java clients
would (:data:`contract.partitions.PARTITIONER`), so a pool's telemetry lands on its
:func:`~contract.partitions.home_partition`.

:func:`partitions` and :func:`watermarks` read a topic's partitions and offsets, waiting a little for a
topic or a partition leader that was created just now; :func:`read_to_end` reads a whole topic as it is now,
:func:`until_ends` partitions up to their ends; :func:`position` is where a message read without error sits.
:func:`librdkafka_logger` is the logger every client hands librdkafka's own log lines to (:func:`client_config`
sets it), instead of librdkafka's own writes to stderr. librdkafka says the same thing about an unreachable
broker every few dozen milliseconds, and retries by itself: its notes about a broker still starting go to
debug; a broker it cannot reach is said once at info, and only while it stays unreachable as a warning once a
minute, with how many such notes there were (:class:`_Notes`). So a command that gives up on Kafka prints its
own one line, not hundreds of librdkafka's; a server says once a minute that the broker is still away.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from headroom.contract.partitions import PARTITIONER
from headroom.contract.topics import KafkaSettings
from headroom.kafka_auth import librdkafka_options

# librdkafka's notes about a broker that is still starting up, which it retries by itself
TRANSIENT = ("Coordinator load in progress", "Coordinator not available")
# ... and about a broker it cannot reach (it retries those too)
UNREACHABLE = ("Connect to ", "Connection refused", "brokers are down", "Failed to resolve", "Disconnected",
               "Receive failed", "timed out")
REPEAT_INTERVAL_S = 60.0


class _Notes(logging.Filter):
    """librdkafka's lines on one logger: transient ones at debug, each kind of line at most once per
    :data:`REPEAT_INTERVAL_S` with how many were left out, and an unreachable broker at info until it has been
    unreachable that long."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self._kinds: dict[str, list[float]] = {}  # kind -> [first seen, last shown, left out since]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if any(note in message for note in TRANSIENT):
            return self._lower(record, logging.DEBUG)
        unreachable = any(note in message for note in UNREACHABLE)
        kind = re.sub(r"[\d.]+", "#", message.split("]: ", 1)[-1])  # without the client's name, addresses, times
        now = self._clock()
        seen = self._kinds.get(kind)
        if seen is None:
            if len(self._kinds) > 1000:
                self._kinds.clear()
            self._kinds[kind] = [now, now, 0]
            return self._lower(record, logging.INFO) if unreachable else True
        if now - seen[1] < REPEAT_INTERVAL_S:
            seen[2] += 1
            return False
        record.msg, record.args = f"{message} ({int(seen[2])} more like it in {now - seen[1]:.0f} s)", None
        seen[1], seen[2] = now, 0
        return True  # at its own level: the broker is still away, or the same error keeps coming

    @staticmethod
    def _lower(record: logging.LogRecord, level: int) -> bool:
        if record.levelno > level:
            record.levelno, record.levelname = level, logging.getLevelName(level)
        return logging.getLogger(record.name).isEnabledFor(record.levelno)


def librdkafka_logger(name: str) -> logging.Logger:
    """The logger ``<name>.librdkafka``, for a client's ``logger`` option, its lines sorted and spaced out
    (:class:`_Notes`)."""
    logger = logging.getLogger(f"{name}.librdkafka")
    if not any(isinstance(f, _Notes) for f in logger.filters):
        logger.addFilter(_Notes())
    return logger


def client_config(kafka: KafkaSettings) -> dict[str, Any]:
    """What every client needs to reach and authenticate to the brokers, and where its own lines go."""
    return {"bootstrap.servers": kafka.bootstrap_servers, "logger": librdkafka_logger("headroom.kafka"),
            **librdkafka_options(kafka.security)}


def why(err: BaseException) -> str:
    """A Kafka error in words: librdkafka's own text, and for a broker that never answered, where to look.

    >>> why(KafkaException(KafkaError(KafkaError._TRANSPORT, "Failed to get metadata: Local: Broker transport failure")))
    'no broker answered (Failed to get metadata: Local: Broker transport failure): is Kafka running there (`headroom kafka up` starts one) and is HEADROOM_KAFKA_BOOTSTRAP right?'
    """
    error = err.args[0] if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError) else None
    if error is None:
        return str(err)
    if error.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT):
        return (f"no broker answered ({error.str()}): is Kafka running there (`headroom kafka up` starts one) and is "
                "HEADROOM_KAFKA_BOOTSTRAP right?")
    return error.str()


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
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    yield message
                elif (ended := message.partition()) is not None:
                    remaining.pop(ended, None)
                continue
            partition, offset = position(message)
            if _past_end(partition, offset, remaining):  # the rest of a batch, or a later arrival
                remaining.pop(partition, None)
                continue
            yield message
            end = remaining.get(partition)
            if end is not None and offset + 1 >= end:
                del remaining[partition]


def position(message: Message) -> tuple[int, int]:
    """``(partition, offset)`` of a message read without error (librdkafka leaves them unset only on errors)."""
    partition, offset = message.partition(), message.offset()
    if partition is None or offset is None:
        raise ValueError(f"a Kafka message without a position: {message.error()}")
    return partition, offset


def _past_end(partition: int, offset: int, remaining: Mapping[int, int | None]) -> bool:
    """Whether ``partition`` ended already, or ``offset`` is at or past its end offset."""
    if partition not in remaining:
        return True
    end = remaining[partition]
    return end is not None and offset >= end
