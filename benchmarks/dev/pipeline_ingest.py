"""Ingest benchmark: telemetry records per second learning-pipeline workers sustain end to end.

Without ``--workers``, produces N valid synthetic records onto a fresh telemetry topic, starts
``headroom worker start``, and times how long the worker takes from its first ingested record to its last
(read from its Prometheus metrics), and how much CPU time the worker process used meanwhile (records per
CPU-second are steadier than records per second on a machine other work shares).

With ``--workers K``, the records are produced first, pools spread so that every partition is home to as
many pools (:func:`tests.streams.ledger.pools_covering`); then K workers of one group start at once. Time,
records and CPU count from the moment they share every partition (their ``owning telemetry partitions``
log lines) until the last record is ingested (what the first to join read before is left out).
Usage: ``python -m headroom.benchmarks.dev.pipeline_ingest --bootstrap 127.0.0.1:9092 --records 50000 [--workers 2]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from headroom import kafka_clients
from headroom.benchmarks.live import cpu_seconds
from headroom.contract.settings import from_env
from headroom.contract.telemetry import TelemetryRecord, encode, partition_key
from headroom.contract.topics import KafkaSettings
from headroom.kafka_topics import ensure_topics
from tests.streams.ledger import owned_now, pools_covering, share_all
from tests.streams.worker_process import WorkerProcess
from tests.trainer.synthetic import oracle, synthetic_records


def fresh_kafka(bootstrap: str, partitions: int) -> KafkaSettings:
    tag = uuid.uuid4().hex[:8]
    kafka = dataclasses.replace(from_env(KafkaSettings, {}, bootstrap_servers=bootstrap),
                                telemetry_topic=f"bench-telemetry-{tag}", dlq_topic=f"bench-dlq-{tag}",
                                model_topic=f"bench-models-{tag}", telemetry_partitions=partitions)
    ensure_topics(kafka)
    return kafka


def produce(kafka: KafkaSettings, records: list[TelemetryRecord]) -> None:
    producer = kafka_clients.producer(kafka, {"linger.ms": 20})
    for record in records:
        producer.produce(kafka.telemetry_topic, key=partition_key(record), value=encode(record))
        producer.poll(0)
    producer.flush(60)


def worker_cpu_seconds(worker: WorkerProcess) -> float:
    """User + system CPU time of a started worker so far."""
    if worker.process is None:
        raise RuntimeError(f"worker {worker.app_id} was not started")
    return cpu_seconds(worker.process.pid)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--pools", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--no-training", action="store_true", help="measure ingest alone (never retrain)")
    parser.add_argument("--workers", type=int, help="workers of one group, started before the records (docstring)")
    args = parser.parse_args()
    kafka = fresh_kafka(args.bootstrap, args.partitions)
    if args.workers:
        return several_workers(kafka, args)
    per_pool = args.records // args.pools
    records = [r for p in range(args.pools) for r in synthetic_records(
        per_pool, seed=p, pool_key=f"pool-{p}", start_ts=time.time(), rate_per_s=1000.0, predictor=oracle())]
    produce(kafka, records)
    total = len(records)
    with tempfile.TemporaryDirectory() as folder:
        worker = WorkerProcess(kafka, f"bench-{uuid.uuid4().hex[:6]}", Path(folder),
                               extra_env={"HEADROOM_PIPELINE_LOG_LEVEL": "warn",
                                          **({"HEADROOM_RETRAIN_MIN_SAMPLES": str(10**9)} if args.no_training else {})})
        worker.start()
        try:
            worker.wait_for(lambda m: m.get("headroom_telemetry_ingested_total", 0) > 0, 60, "first record")
            began, cpu_began = time.monotonic(), worker_cpu_seconds(worker)
            seen = worker.metric("headroom_telemetry_ingested_total")
            worker.wait_for(lambda m: m.get("headroom_telemetry_ingested_total", 0) >= total, args.timeout,
                            "all records")
            seconds, cpu = time.monotonic() - began, worker_cpu_seconds(worker) - cpu_began
        finally:
            worker.stop()
    print(f"ingested {total - seen:.0f} records in {seconds:.2f} s: {(total - seen) / seconds:,.0f} records/s; "
          f"worker CPU {cpu:.2f} s: {(total - seen) / cpu:,.0f} records/CPU-s ({args.partitions} partitions, "
          f"{args.pools} pools, retraining {'off' if args.no_training else 'on'}, load average "
          f"{os.getloadavg()[0]:.1f})")


def several_workers(kafka: KafkaSettings, args: argparse.Namespace) -> None:
    pools = pools_covering(args.partitions, max(1, args.pools // args.partitions))
    per_pool = args.records // len(pools)
    records = sorted((r for i, pool in enumerate(pools) for r in synthetic_records(
        per_pool, seed=i, pool_key=pool, start_ts=time.time(), rate_per_s=1000.0, predictor=oracle())),
        key=lambda r: r.completion_ts)
    produce(kafka, records)
    total, app_id = len(records), f"bench-{uuid.uuid4().hex[:6]}"
    env = {"HEADROOM_PIPELINE_LOG_LEVEL": "info",  # the ownership lines
           **({"HEADROOM_RETRAIN_MIN_SAMPLES": str(10**9)} if args.no_training else {})}

    def ingested() -> list[float]:
        return [w.metric("headroom_telemetry_ingested_total") for w in workers]

    with tempfile.TemporaryDirectory() as folder:
        workers = [WorkerProcess(kafka, app_id, Path(folder) / f"w{i}", extra_env=env) for i in range(args.workers)]
        try:
            for worker in workers:
                worker.start()
            wait(lambda: share_all(workers, args.partitions) and all(owned_now(w) for w in workers), 120,
                 "every worker owning partitions")
            began, before = time.monotonic(), ingested()
            cpu_before = [worker_cpu_seconds(w) for w in workers]
            wait(lambda: sum(ingested()) >= total, args.timeout, "every record")
            seconds, after = time.monotonic() - began, ingested()
            cpu = [worker_cpu_seconds(w) - c for w, c in zip(workers, cpu_before)]
        finally:
            for worker in workers:
                worker.stop()
    timed = sum(after) - sum(before)
    print(f"{args.workers} workers ingested {timed:.0f} of {total} records (the rest before they shared every "
          f"partition) in {seconds:.2f} s: {timed / seconds:,.0f} records/s; workers' CPU {sum(cpu):.2f} s: "
          f"{timed / sum(cpu):,.0f} records/CPU-s, {1e6 * sum(cpu) / timed:.0f} µs/record (per worker: "
          + ", ".join(f"{a - b:.0f} records in {c:.2f} CPU-s" for a, b, c in zip(after, before, cpu))
          + f"; {args.partitions} partitions, {len(pools)} pools, retraining {'off' if args.no_training else 'on'}, "
          f"load average {os.getloadavg()[0]:.1f})")


def wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


if __name__ == "__main__":
    main()
