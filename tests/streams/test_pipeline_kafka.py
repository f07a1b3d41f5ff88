"""The learning pipeline worker as a real process on the real broker: learning, drift, restart, bad input."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections import Counter

import numpy as np
import pytest
from confluent_kafka import Producer

from headroom.contract.features import FEATURE_SCHEMA, RAW_COLUMNS, records_matrix
from headroom.contract.model_update import load_booster, make_update
from headroom.contract.strata import stratum_key
from headroom.contract.targets import target_value
from headroom.contract.telemetry import TelemetryRecord, encode, partition_key
from headroom.contract.topics import REASON_HEADER
from headroom.kafka_clients import read_to_end
from headroom.model_topic import read_all, read_latest
from headroom.streams.state_topic import state_topic
from headroom.trainer.evaluation import score
from headroom.trainer.fit import fit, model_bytes, predict
from headroom.trainer.params import TrainParams
from headroom.trainer.publish import ModelPublisher
from tests.keys import TEST_KEY, TRUST
from tests.streams.worker_process import WorkerProcess
from tests.trainer.synthetic import samples_of, synthetic_records

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


def produce(kafka, records: list) -> None:
    """Records as a router sends them, keyed by pool."""
    send(kafka, [{"key": partition_key(r), "value": encode(r)} for r in records])


def produce_spread(kafka, payloads: list[bytes], partitions: int) -> None:
    """Raw values dealt out over ``partitions`` in turn."""
    send(kafka, [{"value": payload, "partition": i % partitions} for i, payload in enumerate(payloads)])


def send(kafka, messages: list[dict]) -> None:
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 10})
    for message in messages:
        producer.produce(kafka.telemetry_topic, **message)
        producer.poll(0)
    assert producer.flush(30) == 0


def read_topic(kafka, topic: str, timeout_s: float = 30.0) -> list:
    """Every message currently on ``topic`` (all partitions)."""
    return read_to_end(kafka, topic, timeout_s)


def wait_for_version(kafka, key: str, newer_than: int, worker: WorkerProcess, timeout_s: float = 120.0,
                     drift: bool = False, trained_until: float = 0.0):
    """The first version of ``key`` above ``newer_than`` (drift-triggered, trained on data up to a time)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for item in read_all(kafka, TRUST):
            u = item.update
            if (u is not None and u.key == key and u.version > newer_than and (u.drift_reason or not drift)
                    and u.window_stats.get("newest_ts", 0.0) >= trained_until):
                return u
        assert worker.process.poll() is None, f"worker exited:\n{worker.log()[-3000:]}"
        time.sleep(1.0)
    raise AssertionError(f"no {'drift-triggered ' if drift else ''}version of {key} above v{newer_than} "
                         f"within {timeout_s} s:\n{worker.log()[-3000:]}")


def with_predictions(records: list[TelemetryRecord], boosters: dict[str, object]) -> list[TelemetryRecord]:
    """The records as a router using ``boosters`` (target -> booster) would have reported them."""
    features = records_matrix(records)
    predicted = {target: predict(b, features) for target, b in boosters.items()}
    return [dataclasses.replace(r, **{f"predicted_{t}_ms": float(p[i]) for t, p in predicted.items()})
            for i, r in enumerate(records)]


def test_learns_then_detects_a_slowdown_and_promotes_a_better_model(pipeline_kafka, tmp_path):
    worker = WorkerProcess(pipeline_kafka, f"learn-{uuid.uuid4().hex[:8]}", tmp_path, extra_env={
        "HEADROOM_RETRAIN_INTERVAL": "3", "HEADROOM_RETRAIN_MIN_SAMPLES": "150", "HEADROOM_DRIFT_COOLDOWN": "1",
        "HEADROOM_DRIFT_MEMORY": "2"}).start()
    try:
        start = time.time()
        before = synthetic_records(1000, seed=21, stream_fraction=1.0, start_ts=start, rate_per_s=100.0)
        produce(pipeline_kafka, before)
        old = {t: wait_for_version(pipeline_kafka, f"pool-a/{t}/mean", 0, worker) for t in ("ttft", "tpot")}
        assert old["ttft"].holdout_metrics["mape"] < 0.25
        old_boosters = {t: load_booster(u.model) for t, u in old.items()}

        # The router now predicts with version 1: first while nothing changed, then the servers slow down 2x.
        steady = synthetic_records(600, seed=24, stream_fraction=1.0, start_ts=start + 11.0, rate_per_s=100.0)
        after = synthetic_records(1500, seed=22, slowdown=2.0, stream_fraction=1.0, start_ts=start + 17.0,
                                  rate_per_s=100.0)
        produce(pipeline_kafka, with_predictions(steady + after, old_boosters))
        worker.wait_for(lambda m: m.get('headroom_drift_events_total{pool_key="pool-a",target="ttft"}', 0) >= 1,
                        90, "drift on ttft")
        worker.wait_for(lambda m: m.get("headroom_telemetry_ingested_total", 0) >= 3100, 90, "all records")
        answer = wait_for_version(pipeline_kafka, "pool-a/ttft/quantile", 0, worker, drift=True)
        assert "adwin detected drift in ttft relative error" in answer.drift_reason
        drifted = wait_for_version(pipeline_kafka, "pool-a/ttft/mean", old["ttft"].version, worker,
                                   trained_until=after[-1].completion_ts - 2.0)

        fresh = synthetic_records(1000, seed=23, slowdown=2.0, stream_fraction=1.0, start_ts=start + 50.0)
        features = records_matrix(fresh)
        actual = np.array([r.ttft_ms for r in fresh])
        old_error = score(actual, predict(old_boosters["ttft"], features)).mae
        new_error = score(actual, predict(load_booster(drifted.model), features)).mae
        assert new_error < old_error
        latest, rejected = read_latest(pipeline_kafka, TRUST)
        assert rejected == []
        assert latest["pool-a/ttft/mean"].version >= drifted.version > old["ttft"].version
        assert latest["pool-a/ttft/quantile"].version >= 1
    finally:
        worker.stop()


GARBAGE_KINDS = (
    lambda i, raw: b"\xff\xfe not json %d" % i,
    lambda i, raw: raw.replace(b'"e2e_ms":', b'"e2e_ms":NaN,"x":'),
    lambda i, raw: raw.replace(b'"num_running":', b'"num_running":-'),
    lambda i, raw: raw.replace(b'"prompt_tokens":', b'"prompt_tokens":"many",' b'"y":'),
    lambda i, raw: raw.replace(b'"e2e_ms":', b'"e2e_ms":-1,"z":'),
)


def expected_strata(records: list[TelemetryRecord]) -> Counter:
    counts: Counter = Counter()
    for r in records:
        for target in ("ttft", "tpot", "e2e"):
            if target_value(r, target) is not None:
                counts[(target, stratum_key(num_waiting=r.num_waiting, kv_cache_usage=r.kv_cache_usage,
                                            prefix_match=r.prefix_match))] += 1
    return counts


def test_restart_restores_windows_from_the_changelog_without_duplicates_and_bad_input_is_dead_lettered(
        pipeline_kafka, tmp_path):
    records = synthetic_records(1200, seed=31, start_ts=time.time(), rate_per_s=500.0)
    payloads, garbage = [], []
    for i, record in enumerate(records):
        payloads.append(encode(record))
        if i % 19 == 0:  # about 5% garbage, of every kind
            bad = GARBAGE_KINDS[len(garbage) % len(GARBAGE_KINDS)](i, encode(dataclasses.replace(
                record, request_id=f"bad-{i}")))
            payloads.append(bad)
            garbage.append(bad)
    produce_spread(pipeline_kafka, payloads, 4)
    app_id = f"restart-{uuid.uuid4().hex[:8]}"
    no_training = {"HEADROOM_RETRAIN_MIN_SAMPLES": str(10**9), "HEADROOM_PIPELINE_SESSION_TIMEOUT": "6"}
    first = WorkerProcess(pipeline_kafka, app_id, tmp_path, extra_env=no_training).start()
    try:
        first.wait_for(lambda m: m.get("headroom_telemetry_ingested_total", 0) >= 400, 120, "400 records ingested")
    finally:
        first.kill()

    expected = expected_strata(records)
    totals = Counter()
    for (target, _), count in expected.items():
        totals[target] += count
    second = WorkerProcess(pipeline_kafka, app_id, tmp_path, extra_env=no_training).start()
    try:
        second.wait_for(lambda m: all(m.get(f'headroom_window_rows{{pool_key="pool-a",target="{t}"}}') == n
                                      for t, n in totals.items()), 120, f"windows of {dict(totals)} rows")
        time.sleep(2.0)  # anything still arriving would be a duplicate; it must not be there
        samples = second.metrics()
        assert {t: samples[f'headroom_window_rows{{pool_key="pool-a",target="{t}"}}'] for t in totals} == totals
    finally:
        second.stop()

    table: dict[str, dict] = {}
    for message in read_topic(pipeline_kafka, state_topic(app_id)):
        key = json.loads(message.key())
        if message.value() is None:
            table.pop(key, None)
        else:
            table[key] = json.loads(message.value())
    strata: Counter = Counter()
    for key, value in table.items():
        if not key.startswith("hwm:"):
            _, target, stratum, _ = json.loads(key)
            strata[(target, stratum)] += len(value["rows"])
            assert value["schema"] == FEATURE_SCHEMA
            assert all(len(row) == 4 + len(RAW_COLUMNS) for row in value["rows"])
    assert strata == expected

    letters = read_topic(pipeline_kafka, pipeline_kafka.dlq_topic)
    assert {m.value() for m in letters} == set(garbage)
    assert all(dict(m.headers())[REASON_HEADER] for m in letters)


def test_warm_start_continues_the_published_versions(pipeline_kafka, tmp_path):
    records = synthetic_records(800, seed=41, stream_fraction=1.0, start_ts=time.time())
    weak = fit(samples_of(records[:200], "ttft"), TrainParams(n_trees=2, max_depth=1))
    ModelPublisher(pipeline_kafka, TEST_KEY).publish(make_update(
        model=model_bytes(weak), version=5, pool_key="pool-a", target="ttft", objective="mean",
        feature_schema=FEATURE_SCHEMA, model_format="ubj", created_at=time.time()))
    produce(pipeline_kafka, records)
    worker = WorkerProcess(pipeline_kafka, f"warm-{uuid.uuid4().hex[:8]}", tmp_path).start()
    try:
        update = wait_for_version(pipeline_kafka, "pool-a/ttft/mean", 5, worker, timeout_s=90)
        assert update.version == 6
        assert "warm start: 1 live model(s)" in worker.log()
        assert [item.update.version for item in read_all(pipeline_kafka, TRUST)
                if item.update.key == "pool-a/ttft/mean"][:2] == [5, 6]
    finally:
        worker.stop()
