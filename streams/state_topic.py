"""The windows' changelog topic: written by each partition's owner in its transactions, read back committed.

``<app id>-windows-changelog`` is compacted and has one partition per telemetry partition: partition ``p``
holds the table entries of the windows built from telemetry partition ``p`` (:mod:`streams.windows`).
Only the owner of ``p`` writes there, through its fenced transactional producer
(:mod:`streams.ownership`); taking ``p`` over, a worker reads it (:func:`read_state`) with
``isolation.level=read_committed`` up to its end, so a write the previous owner left unfinished — or a
fenced worker attempted — is never part of what it restores.
"""

from __future__ import annotations

import json
from collections.abc import Collection

from confluent_kafka import KafkaException

from headroom.contract.topics import KafkaSettings, TopicSpec
from headroom.kafka_clients import consumer, until_ends

WINDOWS = "windows"


def state_topic(app_id: str) -> str:
    return f"{app_id}-{WINDOWS}-changelog"


def state_spec(app_id: str, partitions: int) -> TopicSpec:
    """The topic as the worker creates it (the name Faust gave it when it kept the table)."""
    return TopicSpec(state_topic(app_id), partitions, {"cleanup.policy": "compact"})


def entry_key(key: str) -> bytes:
    """A table key as the topic stores it: a JSON string."""
    return json.dumps(key).encode()


def read_state(kafka: KafkaSettings, topic: str, partitions: Collection[int],
               timeout_s: float = 120.0) -> dict[str, bytes]:
    """The committed table of ``partitions`` now: the newest value of every key (deleted keys left out)."""
    table: dict[str, bytes] = {}
    if not partitions:
        return table
    client = consumer(kafka, topic, {"enable.partition.eof": True, "isolation.level": "read_committed"})
    try:
        for message in until_ends(client, topic, dict.fromkeys(partitions), timeout_s):
            if message.error() is not None:
                raise KafkaException(message.error())
            key, value = message.key(), message.value()
            if key is None:
                raise KafkaException(f"a record without a key at offset {message.offset()} of {topic}")
            if value is None:
                table.pop(json.loads(key), None)
            else:
                table[json.loads(key)] = value
    finally:
        client.close()
    return table
