import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from headroom.contract.topics import MODEL_MESSAGE_MAX_BYTES, TopicSpec
from headroom.kafka_topics import ensure_topics, partition_count, topic_configs, topic_drift

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


def test_a_topic_that_drifted_from_its_declaration_is_reported_then_altered(kafka, fresh_topic, caplog):
    name = fresh_topic("drifted", partitions=1, config={"cleanup.policy": "delete", "retention.ms": "60000"})
    declared = TopicSpec(name, 2, {"cleanup.policy": "compact", "retention.ms": "-1"})

    with caplog.at_level(logging.WARNING, logger="headroom.kafka_topics"):
        assert ensure_topics(kafka, [declared]) == []
    [drift] = topic_drift(kafka, [declared])
    assert drift.config == {"cleanup.policy": ("delete", "compact"), "retention.ms": ("60000", "-1")}
    assert drift.partitions == (1, 2)
    assert drift.describe() in caplog.text
    assert topic_configs(kafka, name)["cleanup.policy"] == "delete"  # a warning changes nothing

    ensure_topics(kafka, [declared], alter=True)
    configs = topic_configs(kafka, name)
    assert (configs["cleanup.policy"], configs["retention.ms"]) == ("compact", "-1")
    [left] = topic_drift(kafka, [declared])
    assert left.config == {} and left.partitions == (1, 2)  # partitions are never changed by ensure_topics


def test_the_declared_topics_of_the_test_broker_have_not_drifted(kafka):
    assert topic_drift(kafka) == []


def test_the_topics_command_reports_drift_and_alters_it(kafka, fresh_topic):
    models = fresh_topic("models", config={"cleanup.policy": "delete"})  # a model topic that would lose versions
    env = {**os.environ, "HEADROOM_KAFKA_BOOTSTRAP": kafka.bootstrap_servers, "HEADROOM_TOPIC_MODELS": models}
    command = [str(Path(sys.executable).parent / "headroom"), "kafka", "topics"]
    reported = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert reported.returncode == 1
    assert f"topic '{models}' differs from its declaration: cleanup.policy=delete (declared compact)" in reported.stdout
    altered = subprocess.run([*command, "--alter"], env=env, capture_output=True, text=True, timeout=120)
    assert altered.returncode == 0, altered.stdout + altered.stderr
    assert topic_configs(kafka, models)["cleanup.policy"] == "compact"
