"""``model-updates`` on Kafka: publishing versions, reading back the latest per key, tailing new ones.

Messages are :mod:`contract.model_update` bytes keyed by the model key, so the compacted topic keeps the
newest version of every model. Readers skip messages that fail :func:`~contract.model_update.decode_update`
and report them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, Producer, TopicPartition

from headroom.contract.model_update import InvalidUpdate, ModelUpdate, decode_update, encode_update
from headroom.contract.topics import MODEL_MESSAGE_MAX_BYTES, KafkaSettings


class PublishError(RuntimeError):
    """A model update could not be written to Kafka."""


class ModelPublisher:
    """Writes model updates, one acknowledged message each."""

    def __init__(self, kafka: KafkaSettings, timeout_s: float = 30.0):
        self._topic = kafka.model_topic
        self._timeout_s = timeout_s
        self._producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "acks": "all",
                                   "enable.idempotence": True, "message.max.bytes": MODEL_MESSAGE_MAX_BYTES,
                                   "linger.ms": 0})

    def publish(self, update: ModelUpdate) -> None:
        """Write ``update`` and wait for the broker's acknowledgement."""
        errors: list[object] = []
        self._producer.produce(self._topic, key=update.key.encode(), value=encode_update(update),
                               on_delivery=lambda err, _msg: errors.append(err) if err else None)
        remaining = self._producer.flush(self._timeout_s)
        if remaining or errors:
            raise PublishError(f"model update {update.key} v{update.version} was not written to "
                               f"{self._topic!r}: {errors[0] if errors else 'delivery timed out'}")


@dataclass(frozen=True)
class Received:
    """One message read from ``model-updates``: an update, or the reason it was rejected."""

    offset: int
    update: ModelUpdate | None
    error: str | None = None


def _consumer(kafka: KafkaSettings) -> Consumer:
    return Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": f"headroom-reader-{uuid.uuid4()}",
                     "enable.auto.commit": False, "fetch.max.bytes": 2 * MODEL_MESSAGE_MAX_BYTES,
                     "max.partition.fetch.bytes": MODEL_MESSAGE_MAX_BYTES})


def _partitions(consumer: Consumer, topic: str, timeout_s: float) -> list[int]:
    """The partitions of ``topic``, waiting a little for a topic created just now to show up in metadata."""
    deadline = time.monotonic() + timeout_s
    while True:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
        if metadata.error is None and metadata.partitions:
            return sorted(metadata.partitions)
        if time.monotonic() > deadline:
            raise KafkaException(metadata.error)
        time.sleep(0.2)


def _watermarks(consumer: Consumer, partition: TopicPartition, timeout_s: float) -> tuple[int, int]:
    """Low and high offsets, waiting a little for the leader of a partition created just now."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return consumer.get_watermark_offsets(partition, timeout=timeout_s)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _received(message) -> Received:
    try:
        return Received(message.offset(), decode_update(message.value()))
    except InvalidUpdate as err:
        return Received(message.offset(), None, str(err))


def read_all(kafka: KafkaSettings, timeout_s: float = 30.0) -> list[Received]:
    """Every message now on ``model-updates``, in order (up to the end offsets at the time of the call)."""
    consumer = _consumer(kafka)
    try:
        ends = {}
        for partition in _partitions(consumer, kafka.model_topic, min(timeout_s, 10.0)):
            low, high = _watermarks(consumer, TopicPartition(kafka.model_topic, partition), min(timeout_s, 10.0))
            if high > low:
                ends[partition] = high
        consumer.assign([TopicPartition(kafka.model_topic, p, OFFSET_BEGINNING) for p in ends])
        out: list[Received] = []
        deadline = time.monotonic() + timeout_s
        while ends:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {kafka.model_topic!r} took over {timeout_s} s")
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                raise KafkaException(message.error())
            out.append(_received(message))
            if message.offset() + 1 >= ends.get(message.partition(), 0):
                ends.pop(message.partition(), None)
        return out
    finally:
        consumer.close()


def read_latest(kafka: KafkaSettings, timeout_s: float = 30.0) -> tuple[dict[str, ModelUpdate], list[Received]]:
    """The newest valid version per model key, and the messages that were rejected."""
    latest: dict[str, ModelUpdate] = {}
    rejected = []
    for item in read_all(kafka, timeout_s):
        if item.update is None:
            rejected.append(item)
        elif item.update.key not in latest or latest[item.update.key].version < item.update.version:
            latest[item.update.key] = item.update
    return latest, rejected


def tail(kafka: KafkaSettings, *, from_beginning: bool = False, idle_s: float | None = None,
         poll_s: float = 0.5) -> Iterator[Received]:
    """Messages as they arrive on ``model-updates``; stops after ``idle_s`` without one (None: never)."""
    consumer = _consumer(kafka)
    try:
        partitions = _partitions(consumer, kafka.model_topic, 10.0)
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign([TopicPartition(kafka.model_topic, p, start) for p in partitions])
        last = time.monotonic()
        while idle_s is None or time.monotonic() - last < idle_s:
            message = consumer.poll(poll_s)
            if message is None:
                continue
            if message.error():
                raise KafkaException(message.error())
            last = time.monotonic()
            yield _received(message)
    finally:
        consumer.close()
