"""Creating and describing the declared topics with confluent-kafka's admin client (:mod:`headroom.kafka_clients`)."""

from __future__ import annotations

import socket
from collections.abc import Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType
from confluent_kafka.error import KafkaError

from headroom.contract.topics import KafkaSettings, TopicSpec, declared_topics
from headroom.kafka_clients import admin, consumer, watermarks


def answers(bootstrap: str, timeout: float = 2.0) -> bool:
    """True when a broker at ``bootstrap`` answers a metadata request."""
    host, _, port = bootstrap.split(",")[0].rpartition(":")
    try:  # a refused connection needs no client (and no client log noise)
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError:
        return False
    try:
        admin(KafkaSettings(bootstrap_servers=bootstrap)).list_topics(timeout=timeout)
        return True
    except KafkaException:
        return False


def ensure_topics(settings: KafkaSettings, specs: Iterable[TopicSpec] | None = None,
                  timeout: float = 30.0) -> list[str]:
    """Create the declared topics that do not exist yet; returns the names it created."""
    specs = list(declared_topics(settings) if specs is None else specs)
    client = admin(settings)
    existing = set(client.list_topics(timeout=timeout).topics)
    missing = [s for s in specs if s.name not in existing]
    if not missing:
        return []
    futures = client.create_topics(
        [NewTopic(s.name, num_partitions=s.partitions, replication_factor=1, config=s.config) for s in missing],
        operation_timeout=timeout, request_timeout=timeout)
    created = []
    for name, future in futures.items():
        try:
            future.result()
            created.append(name)
        except KafkaException as err:
            if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    return created


def topic_configs(kafka: KafkaSettings, topic: str, timeout: float = 10.0) -> dict[str, str]:
    """The effective configuration of ``topic``."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    client = admin(kafka)  # must outlive the future
    entries = client.describe_configs([resource], request_timeout=timeout)[resource].result()
    return {name: entry.value for name, entry in entries.items()}


def partition_count(kafka: KafkaSettings, topic: str, timeout: float = 10.0) -> int:
    metadata = admin(kafka).list_topics(topic, timeout=timeout)
    return len(metadata.topics[topic].partitions)


def end_offsets(kafka: KafkaSettings, topic: str, timeout: float = 10.0) -> dict[int, int]:
    """The end offset of every partition of ``topic`` (where the next record will go)."""
    client = consumer(kafka, "headroom-end-offsets")
    try:
        partitions = sorted(client.list_topics(topic, timeout=timeout).topics[topic].partitions)
        return {p: high for p, (_, high) in watermarks(client, topic, partitions, timeout).items()}
    finally:
        client.close()
