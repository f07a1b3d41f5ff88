"""A backtest of a topic filled by a simulator run: it reproduces the live pipeline's versions and writes a report.

The live side is the worker's own code path — :meth:`Ingestor.ingest` on each message's bytes, then the
retrainer's asynchronous :meth:`Retrainer.run_due` publishing to ``model-updates`` — driven in-process on
event time after every record, so that the run is deterministic.
"""

import asyncio
import dataclasses

import polars as pl
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from headroom.backtest.replay import Range, Source
from headroom.backtest.run import run_backtest
from headroom.backtest.settings import BacktestSettings
from headroom.contract.telemetry import encode, partition_key
from headroom.model_topic import read_all
from headroom.streams.ingest import build_ingestor
from headroom.streams.retrain import Retrainer
from headroom.trainer.live import LiveModels
from headroom.trainer.publish import ModelPublisher
from tests.backtest.history import VERSIONS, quick_settings, simulated_records
from tests.keys import TEST_KEY, TRUST

pytestmark = pytest.mark.kafka


def fill(bootstrap: str, topic: str, records) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for record in records:
        producer.produce(topic, key=partition_key(record), value=encode(record),
                         timestamp=int(record.completion_ts * 1000))
        producer.poll(0)
    assert producer.flush(30) == 0


async def live_worker(kafka, settings, count: int) -> None:
    """The worker's ingest and retraining over the first ``count`` messages of the telemetry topic."""
    ingestor = build_ingestor(settings)
    retrainer = Retrainer(ingestor, LiveModels(), ModelPublisher(kafka, TEST_KEY), settings,
                          clock=lambda: ingestor.windows.clock)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "backtest-test-live",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(kafka.telemetry_topic, 0, 0)])
    seen = 0
    try:
        while seen < count:
            message = consumer.poll(10.0)
            assert message is not None and not message.error()
            ingestor.ingest(message.value(), message.partition(), message.offset())
            await retrainer.run_due()
            seen += 1
    finally:
        consumer.close()


def test_backtest_promotes_what_the_live_pipeline_promoted_and_writes_the_report(kafka, fresh_topic, tmp_path):
    records = simulated_records()
    kafka = dataclasses.replace(kafka, telemetry_topic=fresh_topic("bt-telemetry"),
                                model_topic=fresh_topic("bt-models", config={"cleanup.policy": "delete"}))
    fill(kafka.bootstrap_servers, kafka.telemetry_topic, records)
    settings = quick_settings()
    asyncio.run(live_worker(kafka, settings, len(records)))
    live = [(item.update.key, item.update.version) for item in read_all(kafka, TRUST)]

    result = run_backtest(Source(kafka, TRUST, Range()), settings,
                          BacktestSettings(out_dir=tmp_path / "report",
                                           policies="round-robin,least-queue,predicted-latency"))

    promoted = result.prequential.rounds.filter(pl.col("promoted"))
    replayed = [(f"{r['pool_key']}/{r['target']}/{r['objective']}", r["version"])
                for r in promoted.iter_rows(named=True)]
    assert len(live) >= 12
    assert replayed == live
    assert result.records.height == len(records)
    assert result.updates.height == len(live)
    ttft_v3 = result.live_error.filter((pl.col("target") == "ttft") & (pl.col("version") == VERSIONS["ttft"]))
    assert ttft_v3["served_records"].to_list() == [sum(r.stream for r in records)]
    assert ttft_v3["holdout_mae_ms"].null_count() == 0

    names = {path.name for path in result.files}
    assert {"report.md", "error_over_time.png", "latency_cdfs.png", "predicted_vs_actual.png", "rounds.parquet",
            "versions.parquet", "published_live_error.parquet", "policy_summary.parquet"} <= names
    for path in result.files:
        assert path.stat().st_size > 0, path
        if path.suffix == ".png":
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (tmp_path / "report" / "report.md").read_text()
    for heading in ("## Prequential evaluation", "## Published history", "## Policy comparison", "no prompt prefix"):
        assert heading in report
    summary = pl.read_parquet(tmp_path / "report" / "policy_summary.parquet")
    assert summary["policy"].to_list() == ["recorded", "recorded, simulated", "round-robin", "least-queue",
                                           "predicted-latency"]
    assert summary.filter(pl.col("policy") == "predicted-latency")["completed"].item() == len(records)
    report = (tmp_path / "report" / "report.md").read_text()
    assert "The recorded assignment, replayed through the calibrated simulator" in report
    assert ("the policies are ranked" in report) is ("rank" in summary.columns) is ("**Not ranked**" not in report)


def test_time_range_limits_the_replay(kafka, fresh_topic, tmp_path):
    records = simulated_records(seconds=20.0)
    kafka = dataclasses.replace(kafka, telemetry_topic=fresh_topic("bt-range"), model_topic=fresh_topic("bt-none"))
    fill(kafka.bootstrap_servers, kafka.telemetry_topic, records)
    middle_ms = int(records[len(records) // 2].completion_ts * 1000)
    result = run_backtest(Source(kafka, TRUST, Range(start_ms=middle_ms)), quick_settings(),
                          BacktestSettings(out_dir=tmp_path / "late", policies=""))
    assert result.records.height == sum(1 for r in records if r.completion_ts * 1000 >= middle_ms)
    assert result.updates.height == 0
    assert (tmp_path / "late" / "report.md").stat().st_size > 0


def test_an_empty_range_still_gives_a_report(kafka, fresh_topic, tmp_path):
    records = simulated_records(seconds=5.0)
    kafka = dataclasses.replace(kafka, telemetry_topic=fresh_topic("bt-empty"), model_topic=fresh_topic("bt-none"))
    fill(kafka.bootstrap_servers, kafka.telemetry_topic, records)
    after_ms = int(records[-1].completion_ts * 1000) + 1
    result = run_backtest(Source(kafka, TRUST, Range(start_ms=after_ms)), quick_settings(),
                          BacktestSettings(out_dir=tmp_path / "empty"))
    assert result.records.height == 0
    assert result.prequential.rounds.height == 0
    assert "0 valid records" in (tmp_path / "empty" / "report.md").read_text()


def test_the_command_line_passes_kafka_options_and_pipeline_settings(kafka, fresh_topic, tmp_path, capsys,
                                                                    monkeypatch, trusted_keys):
    monkeypatch.setenv("HEADROOM_MODEL_TRUSTED_KEYS", trusted_keys)
    from headroom.cli.main import main

    records = simulated_records(seconds=20.0)
    topic, models = fresh_topic("bt-cli"), fresh_topic("bt-cli-models")
    fill(kafka.bootstrap_servers, topic, records)
    out = tmp_path / "cli-report"
    code = main(["backtest", "run", "--bootstrap", kafka.bootstrap_servers, "--telemetry-topic", topic,
                 "--model-topic", models, "--kafka-option", "client.id=headroom-backtest-test",
                 "--kafka-option", "fetch.wait.max.ms=50", "--pipeline", "trees=5", "--pipeline", "min_samples=50",
                 "--policies", "round-robin", "--out", str(out)])
    assert code == 0
    assert f"{len(records)} records" in capsys.readouterr().out
    assert (out / "report.md").stat().st_size > 0
    assert pl.read_parquet(out / "versions.parquet").height > 0

    assert main(["backtest", "run", "--bootstrap", kafka.bootstrap_servers, "--telemetry-topic", topic,
                 "--pipeline", "tree=5", "--out", str(out)]) == 1
    assert "--pipeline tree: no such pipeline setting" in capsys.readouterr().err
    assert main(["backtest", "run", "--bootstrap", kafka.bootstrap_servers, "--telemetry-topic", topic,
                 "--policies", "round-robin,fastest", "--out", str(out)]) == 1
    assert "unknown policy 'fastest'" in capsys.readouterr().err
