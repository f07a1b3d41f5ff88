"""Reading and following ``model-updates``: the one reader of the compacted model topic.

:func:`follow` assigns every partition (from the beginning, or from the end), with no committed offsets,
and yields what arrives: each message, one :data:`CAUGHT_UP` once it has read up to the end offsets it saw
when it started, and ``None`` after each poll that brought nothing (so the caller can look at its clock or
its stop flag). Everything else here is built on it: :func:`read_all` (the topic as it is now),
:func:`read_latest` (the newest valid version per model key) and :func:`tail` (updates as they arrive),
and the predictor's tailer.

Messages are signed :mod:`contract.model_update` bytes keyed by the model key; a reader that decodes them
(:func:`received`, with the reader's :class:`~contract.signing.TrustedKeys`) reports a message that fails
:func:`~contract.model_update.decode_update` — unsigned, signed by an unknown key, forged, malformed —
with its reason rather than stopping. Fetches are sized for the largest model message (:data:`FETCH_OPTIONS`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, KafkaException, Message, TopicPartition

from headroom.contract.model_update import (
    REPLAYED,
    STALE,
    InvalidUpdate,
    ModelUpdate,
    RejectedUpdate,
    decode_update,
    refusal,
)
from headroom.contract.signing import TrustedKeys
from headroom.contract.topics import MODEL_MESSAGE_MAX_BYTES, KafkaSettings
from headroom.kafka_clients import consumer, partitions, position, wait_for_partitions, watermarks

log = logging.getLogger(__name__)

# A fetch holds at least one whole model message of a partition, with room for its batch's framing.
FETCH_OPTIONS: Final = {"max.partition.fetch.bytes": 2 * MODEL_MESSAGE_MAX_BYTES,
                        "fetch.max.bytes": 4 * MODEL_MESSAGE_MAX_BYTES,
                        "receive.message.max.bytes": 8 * MODEL_MESSAGE_MAX_BYTES}
GROUP_PREFIX: Final = "headroom-models"  # every reader's group is its own, named from this (Kafka ACLs grant the prefix)
CAUGHT_UP: Final = "caught-up"  # yielded once by follow(): everything there was at the start has been read


@dataclass(frozen=True)
class Received:
    """One message read from ``model-updates``: an update, or why it was rejected (``reason``: a category of
    :class:`~contract.model_update.RejectedUpdate`, or ``invalid``)."""

    offset: int
    update: ModelUpdate | None
    error: str | None = None
    reason: str | None = None


def received(message: Message, trust: TrustedKeys) -> Received:
    """The message opened with ``trust`` and decoded, or the reason it cannot be."""
    _, offset = position(message)
    value = message.value()
    if value is None:
        return Received(offset, None, "a tombstone: the message has no value", "tombstone")
    try:
        return Received(offset, decode_update(value, trust))
    except RejectedUpdate as err:
        return Received(offset, None, str(err), err.reason)
    except InvalidUpdate as err:
        return Received(offset, None, str(err), "invalid")


def follow(kafka: KafkaSettings, *, from_beginning: bool = True, poll_s: float = 0.5,
           topic_wait_s: float | None = 10.0, log_errors: bool = False,
           options: Mapping[str, Any] | None = None) -> Iterator[Message | str | None]:
    """Messages of ``kafka.model_topic`` as they arrive; see the module docstring for what is yielded.

    ``topic_wait_s`` is how long to wait for the topic to exist (None: for ever, yielding ``None`` about
    every second meanwhile); a Kafka error raises :class:`KafkaException`, or is logged and skipped when
    ``log_errors`` (a server that must outlive a broker's hiccups).
    """
    topic = kafka.model_topic
    client = consumer(kafka, GROUP_PREFIX, {**FETCH_OPTIONS, "enable.partition.eof": True, **(options or {})})
    try:
        if topic_wait_s is None:
            while (found := partitions(client, topic, 10.0)) is None:
                log.warning("model topic %r is not available yet", topic)
                yield None
                time.sleep(1.0)
        else:
            found = wait_for_partitions(client, topic, topic_wait_s)
        ends = {p: high for p, (low, high) in watermarks(client, topic, found, 10.0).items() if high > low} \
            if from_beginning else {}
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        client.assign([TopicPartition(topic, p, start) for p in found])
        if not ends:
            yield CAUGHT_UP
        while True:
            message = client.poll(poll_s)
            if message is None:
                yield None
                continue
            error = message.error()
            if error is None:
                yield message
                partition, offset = position(message)
                done = ends.get(partition, 0) <= offset + 1
            elif error.code() == KafkaError._PARTITION_EOF and (ended := message.partition()) is not None:
                partition, done = ended, True
            elif log_errors:
                log.warning("reading model topic %r: %s", topic, error)
                continue
            else:
                raise KafkaException(error)
            if done and ends.pop(partition, None) is not None and not ends:
                yield CAUGHT_UP
    finally:
        client.close()


def read_all(kafka: KafkaSettings, trust: TrustedKeys, timeout_s: float = 30.0,
             options: Mapping[str, Any] | None = None) -> list[Received]:
    """Every message now on ``model-updates``, in order (up to the end offsets at the time of the call)."""
    out: list[Received] = []
    deadline = time.monotonic() + timeout_s
    for item in follow(kafka, topic_wait_s=min(timeout_s, 10.0), options=options):
        if item is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {kafka.model_topic!r} took over {timeout_s} s")
            continue
        if isinstance(item, str):  # CAUGHT_UP
            return out
        out.append(received(item, trust))
    return out


def read_latest(kafka: KafkaSettings, trust: TrustedKeys,
                timeout_s: float = 30.0) -> tuple[dict[str, ModelUpdate], list[Received]]:
    """The newest valid, trusted version per model key, and the messages that were rejected (a version too
    far ahead of the one before it, :func:`~contract.model_update.refusal`, included; an older one is skipped)."""
    latest: dict[str, ModelUpdate] = {}
    rejected = []
    for item in read_all(kafka, trust, timeout_s):
        update = item.update
        if update is None:
            rejected.append(item)
            continue
        held = latest.get(update.key)
        refused = refusal(update, held.version if held else None, kafka.max_version_jump)
        if refused is None:
            latest[update.key] = update
        elif refused.reason not in (STALE, REPLAYED):
            rejected.append(Received(item.offset, None, refused.detail, refused.reason))
    return latest, rejected


def tail(kafka: KafkaSettings, trust: TrustedKeys, *, from_beginning: bool = False, idle_s: float | None = None,
         poll_s: float = 0.5) -> Iterator[Received]:
    """Messages as they arrive on ``model-updates``; stops after ``idle_s`` without one (None: never)."""
    last = time.monotonic()
    for item in follow(kafka, from_beginning=from_beginning, poll_s=poll_s):
        if isinstance(item, Message):
            last = time.monotonic()
            yield received(item, trust)
        elif idle_s is not None and time.monotonic() - last >= idle_s:
            return
