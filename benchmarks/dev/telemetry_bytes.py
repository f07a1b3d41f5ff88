"""Telemetry on disk: bytes per record on a broker's log for each producer compression codec.

    .venv/bin/python -m headroom.benchmarks.dev.telemetry_bytes --bootstrap 127.0.0.1:9092 --log-dir .headroom/kafka

Synthetic records (one pool, 80% streaming, with predictions) are produced, keyed as a router keys them,
to a fresh one-partition topic per codec (20 ms linger, as a busy router's producer batches); the size of
the partition's log segments under ``--log-dir`` (the local broker's data folder, ``headroom kafka up``)
is then divided by the records.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

from headroom import kafka_clients
from headroom.contract.settings import from_env
from headroom.contract.telemetry import encode, partition_key
from headroom.contract.topics import KafkaSettings, TopicSpec
from headroom.kafka_topics import ensure_topics
from tests.trainer.synthetic import oracle, synthetic_records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--log-dir", type=Path, default=Path(".headroom/kafka"))
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--codecs", default="none,lz4,zstd")
    args = parser.parse_args()
    kafka = from_env(KafkaSettings, {}, bootstrap_servers=args.bootstrap)
    records = synthetic_records(args.records, seed=5, pool_key="pool-a", predictor=oracle())
    values = [encode(r) for r in records]
    print(f"{len(records)} records, {sum(map(len, values)) / len(values):.0f} bytes each as JSON")
    for codec in args.codecs.split(","):
        topic = f"bench-bytes-{codec}-{uuid.uuid4().hex[:6]}"
        ensure_topics(kafka, [TopicSpec(topic, 1, {})])
        producer = kafka_clients.producer(kafka, {"compression.type": codec, "linger.ms": 20})
        for record, value in zip(records, values):
            producer.produce(topic, key=partition_key(record), value=value)
            producer.poll(0)
        producer.flush(30)
        time.sleep(1)  # the broker's write reaches the segment file
        size = sum(f.stat().st_size for f in args.log_dir.rglob(f"{topic}-0/*.log"))
        print(f"{codec}: {size / len(records):.0f} bytes per record on disk "
              f"({size / sum(map(len, values)):.3f} of the JSON)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
