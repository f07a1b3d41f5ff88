"""A self-test of a broker: synthetic telemetry produced to it and read back, exactly once.

The records come from a small explicit latency model (TTFT grows with queue and non-cached prompt
tokens, TPOT with running batch and KV usage) so the summary has something real to show.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import TopicPartition

from headroom import kafka_clients
from headroom.contract.telemetry import TelemetryRecord, decode, encode, partition_key
from headroom.contract.topics import KafkaSettings
from headroom.kafka_topics import end_offsets


@dataclass(frozen=True)
class Summary:
    produced: int
    consumed: int
    duplicates: int
    produce_s: float
    consume_s: float
    received: dict[str, TelemetryRecord] = field(repr=False)  # request id -> the record read back

    @property
    def by_server(self) -> dict[str, tuple[int, float, float]]:
        """Server -> (records, mean TTFT ms, mean TPOT ms) of what was read back."""
        groups: dict[str, list[TelemetryRecord]] = {}
        for record in self.received.values():
            groups.setdefault(record.server_id, []).append(record)
        return {server: (len(rs), sum(r.ttft_ms or 0 for r in rs) / len(rs), sum(r.tpot_ms or 0 for r in rs) / len(rs))
                for server, rs in sorted(groups.items())}


def synthetic_records(count: int, servers: int, seed: int) -> list[TelemetryRecord]:
    rng = random.Random(seed)
    now = time.time()
    records = []
    for i in range(count):
        waiting, running = rng.choice([0, 0, 0, 1, 2, 4, 8]), rng.randint(1, 64)
        prompt, output = int(rng.lognormvariate(6.8, 0.8)) + 1, int(rng.lognormvariate(4.8, 0.9)) + 2
        prefix, kv = rng.choice([0.0, 0.0, 0.5, 0.9]), min(1.0, running / 80 + rng.random() * 0.1)
        ttft = 6.5 + 0.02 * prompt * (1 - prefix) + 45.0 * waiting + rng.gauss(0, 2) ** 2
        tpot = 6.5 + 0.02 * running + 8.0 * kv
        e2e = ttft + tpot * (output - 1)
        dispatched = now + i * 0.001
        records.append(TelemetryRecord(
            request_id=uuid.UUID(int=rng.getrandbits(128)).hex, server_id=f"sim-{i % servers}",
            pool_key="h100/llama3-8b", stream=True, arrival_ts=dispatched, dispatch_ts=dispatched,
            completion_ts=dispatched + e2e / 1000, prompt_tokens=prompt, output_tokens=output,
            kv_cache_usage=kv, num_waiting=waiting, num_running=running, prefix_match=prefix,
            inflight_requests=waiting + running, inflight_prompt_tokens=prompt * (waiting + 1),
            e2e_ms=e2e, max_tokens=output, ttft_ms=ttft, tpot_ms=tpot))
    return records


def round_trip(settings: KafkaSettings, records: list[TelemetryRecord], timeout_s: float = 60.0) -> Summary:
    """Produce ``records`` to the telemetry topic and read exactly those back."""
    producer = kafka_clients.producer(settings, {"enable.idempotence": True, "acks": "all", "linger.ms": 5})
    start_offsets = end_offsets(settings, settings.telemetry_topic)
    began = time.monotonic()
    for record in records:
        producer.produce(settings.telemetry_topic, key=partition_key(record), value=encode(record))
        producer.poll(0)
    if producer.flush(timeout_s):
        raise RuntimeError("telemetry was not fully delivered to Kafka in time")
    produced_s = time.monotonic() - began

    consumer = kafka_clients.consumer(settings, "demo")
    consumer.assign([TopicPartition(settings.telemetry_topic, p, o) for p, o in start_offsets.items()])
    wanted = {r.request_id for r in records}
    seen: dict[str, TelemetryRecord] = {}
    duplicates = 0
    began = time.monotonic()
    try:
        while len(seen) < len(wanted) and time.monotonic() - began < timeout_s:
            for message in consumer.consume(2000, timeout=0.5):
                if message.error():
                    raise RuntimeError(f"consuming telemetry failed: {message.error()}")
                record = decode(message.value())
                if record.request_id in wanted:
                    duplicates += record.request_id in seen
                    seen[record.request_id] = record
    finally:
        consumer.close()
    return Summary(len(records), len(seen), duplicates, produced_s, time.monotonic() - began, seen)
