"""Ingest benchmark: telemetry records per second one learning-pipeline worker sustains end to end.

Produces N valid synthetic records onto a fresh telemetry topic, starts ``headroom worker start``, and
times how long the worker takes from its first ingested record to its last (read from its Prometheus
metrics), and how much CPU time the worker process used meanwhile (records per CPU-second are steadier
than records per second on a machine other work shares).
Usage: ``python benchmarks/pipeline_ingest.py --bootstrap 127.0.0.1:9092 --records 50000``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from headroom.process import configure

configure()


from headroom import kafka_clients  # noqa: E402
from headroom.contract.settings import from_env  # noqa: E402
from headroom.contract.telemetry import encode, partition_key  # noqa: E402
from headroom.contract.topics import KafkaSettings  # noqa: E402
from headroom.localkafka.admin import ensure_topics  # noqa: E402
from tests.streams.worker_process import WorkerProcess  # noqa: E402
from tests.trainer.synthetic import oracle, synthetic_records  # noqa: E402


def fresh_kafka(bootstrap: str, partitions: int) -> KafkaSettings:
    tag = uuid.uuid4().hex[:8]
    kafka = dataclasses.replace(from_env(KafkaSettings, {}, bootstrap_servers=bootstrap),
                                telemetry_topic=f"bench-telemetry-{tag}", dlq_topic=f"bench-dlq-{tag}",
                                model_topic=f"bench-models-{tag}", telemetry_partitions=partitions)
    ensure_topics(kafka)
    return kafka


def produce(kafka: KafkaSettings, records) -> None:
    producer = kafka_clients.producer(kafka, {"linger.ms": 20})
    for record in records:
        producer.produce(kafka.telemetry_topic, key=partition_key(record), value=encode(record))
        producer.poll(0)
    producer.flush(60)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--pools", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--no-training", action="store_true", help="measure ingest alone (never retrain)")
    args = parser.parse_args()
    kafka = fresh_kafka(args.bootstrap, args.partitions)
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
            began, cpu_began = time.monotonic(), cpu_seconds(worker.process.pid)
            seen = worker.metric("headroom_telemetry_ingested_total")
            worker.wait_for(lambda m: m.get("headroom_telemetry_ingested_total", 0) >= total, args.timeout,
                            "all records")
            seconds, cpu = time.monotonic() - began, cpu_seconds(worker.process.pid) - cpu_began
        finally:
            worker.stop()
    print(f"ingested {total - seen:.0f} records in {seconds:.2f} s: {(total - seen) / seconds:,.0f} records/s; "
          f"worker CPU {cpu:.2f} s: {(total - seen) / cpu:,.0f} records/CPU-s ({args.partitions} partitions, "
          f"{args.pools} pools, retraining {'off' if args.no_training else 'on'}, load average "
          f"{os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
