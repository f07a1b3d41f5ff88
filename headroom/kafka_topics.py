"""Creating, checking and describing the declared topics with confluent-kafka's admin client
(:mod:`headroom.kafka_clients`)."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from headroom.contract.topics import KafkaSettings, TopicSpec, declared_topics
from headroom.kafka_clients import admin, consumer, watermarks
from headroom.topic_drift import TopicDrift, compare

log = logging.getLogger(__name__)


def answers(kafka: KafkaSettings, timeout: float = 2.0) -> bool:
    """True when a broker at ``kafka.bootstrap_servers`` answers a metadata request from this client."""
    host, _, port = kafka.bootstrap_servers.split(",")[0].rpartition(":")
    try:  # a refused connection needs no client (and no client log noise)
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError:
        return False
    try:
        admin(kafka).list_topics(timeout=timeout)
        return True
    except KafkaException:
        return False


def ensure_topics(settings: KafkaSettings, specs: Iterable[TopicSpec] | None = None,
                  timeout: float = 30.0, *, alter: bool = False) -> list[str]:
    """Create the declared topics that do not exist yet; returns the names it created.

    An existing topic that differs from its declaration (see :mod:`headroom.topic_drift`) is logged as a
    warning, or, with ``alter``, given the declared configuration (partitions are never changed here).
    """
    specs = list(declared_topics(settings) if specs is None else specs)
    client = admin(settings)
    existing = client.list_topics(timeout=timeout).topics
    for drift in _drifts(client, [s for s in specs if s.name in existing], existing, timeout):
        if alter and drift.config:
            _alter(client, drift, timeout)
            log.warning("altered %s", drift.describe())
        else:
            log.warning("%s", drift.describe())
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


def topic_drift(settings: KafkaSettings, specs: Iterable[TopicSpec] | None = None,
                timeout: float = 30.0) -> list[TopicDrift]:
    """How the existing declared topics differ from their declarations."""
    specs = list(declared_topics(settings) if specs is None else specs)
    client = admin(settings)
    existing = client.list_topics(timeout=timeout).topics
    return _drifts(client, [s for s in specs if s.name in existing], existing, timeout)


def _drifts(client: AdminClient, specs: list[TopicSpec], metadata: Mapping[str, Any],
            timeout: float) -> list[TopicDrift]:
    if not specs:
        return []
    resources = [ConfigResource(ResourceType.TOPIC, s.name) for s in specs]
    futures = client.describe_configs(resources, request_timeout=timeout)
    drifts = []
    for spec, resource in zip(specs, resources, strict=True):
        configs = {name: entry.value for name, entry in futures[resource].result().items()}
        drift = compare(spec, len(metadata[spec.name].partitions), configs)
        if drift is not None:
            drifts.append(drift)
    return drifts


def _alter(client: AdminClient, drift: TopicDrift, timeout: float) -> None:
    entries = [ConfigEntry(key, declared, incremental_operation=AlterConfigOpType.SET)
               for key, (_, declared) in drift.config.items()]
    resource = ConfigResource(ResourceType.TOPIC, drift.topic, incremental_configs=entries)
    client.incremental_alter_configs([resource], request_timeout=timeout)[resource].result()


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
