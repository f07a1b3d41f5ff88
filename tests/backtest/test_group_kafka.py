"""Backtest workers sharing a topic's partitions as one consumer group, as real processes on the test broker:
1, 2 and 3 workers give the report one process gives, and a history not keyed by pool is refused."""

import dataclasses
import subprocess
import sys

import pytest

from headroom.backtest.cli import pipeline_settings
from headroom.backtest.group import SplitError, backtest_partitions
from headroom.backtest.replay import Range, Source
from headroom.backtest.run import report_parts, run_backtest
from headroom.backtest.settings import BacktestSettings
from headroom.contract.partitions import home_partition
from headroom.contract.telemetry import encode, partition_key
from headroom.kafka_clients import producer
from tests.backtest.history import simulated_records
from tests.keys import TRUST

pytestmark = pytest.mark.kafka

PIPELINE = ["trees=10", "retrain_interval_s=10", "min_samples=100"]
PIPELINE_PAIRS = [(name, value) for name, _, value in (setting.partition("=") for setting in PIPELINE)]
TABLES = {"rounds": ["fit_seconds"], "drifts": [], "errors": [], "versions": []}


def pools_on_partitions(partitions: int) -> list[str]:
    """Three pool keys whose records land on three different partitions (Kafka's default partitioner)."""
    found: dict[int, str] = {}
    for i in range(100):
        found.setdefault(home_partition(f"pool-{i}", partitions), f"pool-{i}")
    return [found[p] for p in sorted(found)[:3]]


def fill(kafka, records, keyed: bool = True) -> None:
    client = producer(kafka, {"linger.ms": 5})
    for i, record in enumerate(records):
        client.produce(kafka.telemetry_topic, key=partition_key(record), value=encode(record),
                       timestamp=int(record.completion_ts * 1000), **({} if keyed else {"partition": i % 4}))
        client.poll(0)
    assert client.flush(30) == 0


def workers(kafka, count: int, group: str, parts) -> None:
    """``count`` worker processes of ``group`` started together; each must succeed."""
    command = [sys.executable, "-m", "headroom.cli.main", "backtest", "worker", "--bootstrap",
               kafka.bootstrap_servers, "--telemetry-topic", kafka.telemetry_topic, "--group", group,
               "--parts", str(parts), "--processes", "1", "--settle", "4",
               *[flag for setting in PIPELINE for flag in ("--pipeline", setting)]]
    running = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(count)]
    for process in running:
        out, err = process.communicate(timeout=600)
        assert process.returncode == 0, err
        assert "Coordinator load in progress" not in err and "rdkafka" not in err


@pytest.mark.alone  # once, beside another test file, one worker's rounds differed from one process's: not found why
def test_one_two_and_three_workers_give_the_report_one_process_gives(kafka, fresh_topic, tmp_path):
    kafka = dataclasses.replace(kafka, telemetry_topic=fresh_topic("bt-group", partitions=4),
                                model_topic=fresh_topic("bt-group-models"))
    history = []
    for seed, pool in enumerate(pools_on_partitions(4), start=1):
        history += [dataclasses.replace(r, pool_key=pool) for r in simulated_records(seconds=40.0, seed=seed)]
    fill(kafka, sorted(history, key=lambda r: r.completion_ts))
    pipeline = pipeline_settings(PIPELINE_PAIRS)
    alone = run_backtest(Source(kafka, TRUST, Range()), pipeline,
                         BacktestSettings(out_dir=tmp_path / "alone", policies="", processes=1))
    assert alone.prequential.rounds.get_column("pool_key").n_unique() == 3

    for count in (1, 2, 3):
        parts = tmp_path / f"parts-{count}"
        workers(kafka, count, f"bt-group-{count}-{kafka.telemetry_topic}", parts)
        assert sorted(path.name for path in parts.iterdir()) == [f"partition-{p}" for p in range(4)]
        merged = report_parts(parts, kafka, TRUST, pipeline,
                              BacktestSettings(out_dir=tmp_path / f"merged-{count}", policies=""))
        for table, volatile in TABLES.items():
            assert getattr(merged.prequential, table).drop(volatile).equals(
                getattr(alone.prequential, table).drop(volatile)), (count, table)
        assert merged.live_error.equals(alone.live_error)
        assert merged.prequential.records == alone.prequential.records
        report = (tmp_path / f"merged-{count}" / "report.md").read_text()
        assert f"{alone.prequential.records} valid records" in report


def test_a_history_not_keyed_by_pool_cannot_be_split_by_partition(kafka, fresh_topic):
    kafka = dataclasses.replace(kafka, telemetry_topic=fresh_topic("bt-unkeyed", partitions=4))
    fill(kafka, simulated_records(seconds=5.0), keyed=False)
    with pytest.raises(SplitError, match="was not keyed by pool"):
        backtest_partitions(Source(kafka, TRUST, Range()), pipeline_settings(PIPELINE_PAIRS), {0, 1}, 1)

