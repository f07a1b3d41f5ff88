import pytest

from headroom.contract.topics import MODEL_MESSAGE_MAX_BYTES
from headroom.localkafka.admin import ensure_topics, partition_count, topic_configs

pytestmark = pytest.mark.kafka


def test_model_updates_is_compacted_and_takes_large_models(kafka):
    configs = topic_configs(kafka, kafka.model_topic)
    assert configs["cleanup.policy"] == "compact"
    assert int(configs["max.message.bytes"]) == MODEL_MESSAGE_MAX_BYTES


def test_telemetry_keeps_its_history(kafka):
    configs = topic_configs(kafka, kafka.telemetry_topic)
    assert configs["retention.ms"] == "-1"
    assert configs["retention.bytes"] == "-1"
    assert partition_count(kafka, kafka.telemetry_topic) == kafka.telemetry_partitions


def test_creating_topics_again_is_a_no_op(kafka):
    assert ensure_topics(kafka) == []
