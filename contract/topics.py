"""The Kafka topics headroom uses, declared once: names come from :class:`KafkaSettings`.

``telemetry`` keeps its history forever (backtests replay it), ``telemetry-dlq`` keeps rejected records
with their reason, ``model-updates`` is compacted so the latest version per key survives, and large
enough for a model; its cleaner leaves every message alone for :data:`MODEL_COMPACTION_LAG_MS`, the time the
worker has to put a model back when something else lands under its key (:mod:`streams.model_guard`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headroom.contract.kafka_security import KafkaSecurity
from headroom.contract.model_update import MAX_VERSION_JUMP
from headroom.contract.settings import nested, setting

MODEL_MESSAGE_MAX_BYTES = 16 * 1024 * 1024
MODEL_COMPACTION_LAG_MS = 10 * 60 * 1000
REASON_HEADER = "headroom-reject-reason"  # a dead letter's header: why the record was rejected
SOURCE_HEADER = "headroom-source"  # a dead letter's header: where the record came from (topic/partition/offset)


@dataclass(frozen=True)
class KafkaSettings:
    """Where the broker is, how to authenticate to it, and what its topics are called."""

    bootstrap_servers: str = setting("127.0.0.1:9092", "HEADROOM_KAFKA_BOOTSTRAP", "Kafka bootstrap servers.")
    telemetry_topic: str = setting("telemetry", "HEADROOM_TOPIC_TELEMETRY", "Completed-request telemetry.")
    dlq_topic: str = setting("telemetry-dlq", "HEADROOM_TOPIC_DLQ", "Rejected telemetry with its reason.")
    model_topic: str = setting("model-updates", "HEADROOM_TOPIC_MODELS", "Compacted, versioned model updates.")
    telemetry_partitions: int = setting(4, "HEADROOM_TELEMETRY_PARTITIONS", "Partitions of the telemetry topic.")
    max_version_jump: int = setting(MAX_VERSION_JUMP, "HEADROOM_MODEL_MAX_VERSION_JUMP",
                                    "Farthest a model version may lead the live one; readers reject the rest.")
    state_dir: Path = setting(Path(".headroom"), "HEADROOM_STATE_DIR", "Where local state (broker data, logs) lives.")
    security: KafkaSecurity = nested(KafkaSecurity, "TLS and SASL of every client (contract.kafka_security).")


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str]


def declared_topics(settings: KafkaSettings) -> list[TopicSpec]:
    """Every topic headroom creates, with its partitions and configs."""
    return [
        TopicSpec(settings.telemetry_topic, settings.telemetry_partitions,
                  {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}),
        TopicSpec(settings.dlq_topic, 1,
                  {"retention.ms": str(30 * 24 * 3600 * 1000), "cleanup.policy": "delete"}),
        TopicSpec(settings.model_topic, 1,
                  {"cleanup.policy": "compact", "max.message.bytes": str(MODEL_MESSAGE_MAX_BYTES),
                   "min.cleanable.dirty.ratio": "0.1", "segment.ms": str(3600 * 1000),
                   "min.compaction.lag.ms": str(MODEL_COMPACTION_LAG_MS)}),
    ]
