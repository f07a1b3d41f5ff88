from pathlib import Path

import pytest

from headroom.contract.settings import SettingsError, describe, from_env
from headroom.contract.topics import KafkaSettings, declared_topics


def test_environment_overrides_defaults_and_overrides_win():
    settings = from_env(KafkaSettings, {"HEADROOM_KAFKA_BOOTSTRAP": "10.0.0.1:9092",
                                        "HEADROOM_TELEMETRY_PARTITIONS": "8", "HEADROOM_STATE_DIR": "/tmp/x"},
                        telemetry_topic="t2")
    assert settings.bootstrap_servers == "10.0.0.1:9092"
    assert settings.telemetry_partitions == 8
    assert settings.state_dir == Path("/tmp/x")
    assert settings.telemetry_topic == "t2"


def test_bad_value_names_the_variable():
    with pytest.raises(SettingsError, match="HEADROOM_TELEMETRY_PARTITIONS='many'"):
        from_env(KafkaSettings, {"HEADROOM_TELEMETRY_PARTITIONS": "many"})


def test_every_setting_is_documented():
    for name, env, _, doc in describe(KafkaSettings):
        assert env.startswith("HEADROOM_") and doc, name


def test_topics_follow_the_settings():
    topics = {t.name: t for t in declared_topics(from_env(KafkaSettings, {}, model_topic="models-x"))}
    assert topics["models-x"].config["cleanup.policy"] == "compact"
    assert topics["telemetry"].config["retention.ms"] == "-1"
