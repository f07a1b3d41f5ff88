import threading

import pytest
from confluent_kafka import Producer

from headroom.cli.main import main
from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.model_update import make_update
from headroom.model_topic import read_latest, tail
from headroom.trainer.publish import ModelPublisher
from tests.keys import TEST_KEY, TRUST

pytestmark = pytest.mark.kafka


def update(version: int, target: str = "ttft", objective: str = "mean"):
    return make_update(model=b'{"learner": {}}', version=version, pool_key="pool-a", target=target,
                       objective=objective, feature_schema=FEATURE_SCHEMA, model_format="json",
                       created_at=1_700_000_000.0 + version, quantile=0.9 if objective == "quantile" else None,
                       window_stats={"train_rows": 80, "holdout_rows": 20},
                       holdout_metrics={"mae": 3.5, "mape": 0.04, "coverage": 0.91})


def test_read_latest_keeps_the_newest_version_per_key_and_reports_bad_messages(pipeline_kafka):
    publisher = ModelPublisher(pipeline_kafka, TEST_KEY)
    for u in (update(1), update(2), update(1, objective="quantile"), update(3)):
        publisher.publish(u)
    garbage = Producer({"bootstrap.servers": pipeline_kafka.bootstrap_servers})
    for junk in (TEST_KEY.sign(b"HRMU\x00\x00\x00\x02{}"), b"HRMU\x00\x00\x00\x02{}"):  # signed, and not
        garbage.produce(pipeline_kafka.model_topic, key=b"pool-a/ttft/mean", value=junk)
    garbage.flush(10)
    latest, rejected = read_latest(pipeline_kafka, TRUST)
    assert {k: u.version for k, u in latest.items()} == {"pool-a/ttft/mean": 3, "pool-a/ttft/quantile": 1}
    assert [item.reason for item in rejected] == ["invalid", "unsigned"]
    assert "format version" in rejected[0].error


def test_an_empty_topic_has_no_models(pipeline_kafka):
    assert read_latest(pipeline_kafka, TRUST) == ({}, [])


def test_tail_sees_versions_published_after_it_started_and_not_before(pipeline_kafka):
    publisher = ModelPublisher(pipeline_kafka, TEST_KEY)
    publisher.publish(update(1))
    seen: list[int] = []

    def follow():
        for item in tail(pipeline_kafka, TRUST, idle_s=10.0, poll_s=0.2):
            seen.append(item.update.version)
            if len(seen) == 2:
                return

    reader = threading.Thread(target=follow)
    reader.start()
    for version in range(2, 40):  # until the tail, once subscribed, has seen two
        publisher.publish(update(version))
        reader.join(0.5)
        if not reader.is_alive():
            break
    reader.join(15)
    assert len(seen) == 2 and 1 not in seen
    assert seen[1] == seen[0] + 1


def test_models_list_and_tail_commands_print_versions_and_signers(pipeline_kafka, monkeypatch, capsys, trusted_keys):
    monkeypatch.setenv("HEADROOM_MODEL_TRUSTED_KEYS", trusted_keys)
    monkeypatch.setenv("HEADROOM_KAFKA_BOOTSTRAP", "127.0.0.1:1")  # --bootstrap overrides it
    monkeypatch.setenv("HEADROOM_TOPIC_MODELS", pipeline_kafka.model_topic)
    ModelPublisher(pipeline_kafka, TEST_KEY).publish(update(4, target="tpot", objective="quantile"))
    ModelPublisher(pipeline_kafka, TEST_KEY).publish(update(5, target="ttft"))  # a mean model: coverage means nothing
    assert main(["models", "list", "--bootstrap", pipeline_kafka.bootstrap_servers]) == 0
    listing = capsys.readouterr().out
    assert "pool-a/tpot/quantile" in listing and "0.910 (p90)" in listing and f"key {TEST_KEY.key_id}" in listing
    mean_row = next(line for line in listing.splitlines() if "pool-a/ttft/mean" in line)
    assert "0.910" not in mean_row and "3.50" in mean_row
    assert main(["models", "tail", "--bootstrap", pipeline_kafka.bootstrap_servers, "--from-beginning",
                 "--count", "2", "--idle-seconds", "10"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "pool-a/tpot/quantile v4" in lines[0] and "coverage 0.910 (p90)" in lines[0]
    assert f"signed by key {TEST_KEY.key_id}" in lines[0]
    assert "pool-a/ttft/mean v5" in lines[1] and "coverage" not in lines[1]
