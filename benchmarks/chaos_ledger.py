"""The chaos run's ledger: every request answered or refused with a reason, every telemetry record in a
window, in the dead-letter topic, or counted as dropped with a reason — and what is left unexplained.

Requests are counted as the client saw them. Telemetry is reconciled from the topics themselves once the
run has settled: every message of the telemetry topic is looked up in the worker's window table (its rows
carry the partition and offset of their record) and among the sources of the dead-letter topic; the
router's own counts (records delivered, failed, dropped or unusable) account for what never reached the
topic.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TopicPartition

from headroom.contract.topics import SOURCE_HEADER, KafkaSettings
from headroom.kafka_clients import group_consumer, read_to_end, wait_for_partitions, watermarks


@dataclass
class RequestLedger:
    sent: int = 0
    answered: int = 0  # 2xx, complete
    cut: int = 0  # 2xx whose stream ended before its last event
    refused: Counter[str] = field(default_factory=Counter)  # "status type" of answers carrying an error message
    unexplained: list[str] = field(default_factory=list)  # no answer, or an error without a reason

    def record(self, status: int | None, body: Any, complete: bool, failure: str | None = None) -> None:
        self.sent += 1
        if status is None:
            self.unexplained.append(failure or "no answer")
        elif 200 <= status < 300:
            self.answered += complete
            self.cut += not complete
        elif isinstance(body, dict) and isinstance(body.get("error"), dict) and body["error"].get("message"):
            self.refused[f"{status} {body['error'].get('type', '')}".strip()] += 1
        else:
            self.unexplained.append(f"HTTP {status} without a reason: {str(body)[:120]}")


@dataclass
class TelemetryLedger:
    on_topic: int
    in_windows: int
    dead_lettered: int
    unexplained: list[tuple[int, int]]  # (partition, offset) of records found nowhere
    dead_letter_duplicates: int  # letters of a record sent more than once (a worker killed before it wrote them down)


def window_rows(kafka: KafkaSettings, changelog_topic: str) -> set[tuple[int, int]]:
    """(partition, offset) of every record with a row in the final window table."""
    table: dict[bytes, bytes | None] = {}
    for message in read_to_end(kafka, changelog_topic):
        table[message.key()] = message.value()
    rows = set()
    for key, value in table.items():
        name = json.loads(key)
        if value is None or not isinstance(name, str) or name.startswith("hwm:"):
            continue
        _, _, _, partition = json.loads(name)
        rows.update((partition, row[3]) for row in json.loads(value)["rows"])
    return rows


def reconcile_telemetry(kafka: KafkaSettings, changelog_topic: str) -> TelemetryLedger:
    records = {(m.partition(), m.offset()) for m in read_to_end(kafka, kafka.telemetry_topic)}
    sources = Counter()
    for letter in read_to_end(kafka, kafka.dlq_topic):
        topic, partition, offset = dict(letter.headers() or [])[SOURCE_HEADER].decode().rsplit("/", 2)
        if topic == kafka.telemetry_topic:
            sources[(int(partition), int(offset))] += 1
    in_windows = window_rows(kafka, changelog_topic) & records
    dead = set(sources) & records
    return TelemetryLedger(on_topic=len(records), in_windows=len(in_windows), dead_lettered=len(dead),
                           unexplained=sorted(records - in_windows - dead),
                           dead_letter_duplicates=sum(n - 1 for n in sources.values()))


def committed_lag(kafka: KafkaSettings, group_id: str) -> int:
    """Records of the telemetry topic past the offsets ``group_id`` committed (the worker's reader commits the
    offsets it has written down)."""
    client = group_consumer(kafka, group_id)
    try:
        partitions = wait_for_partitions(client, kafka.telemetry_topic, 10.0)
        ends = watermarks(client, kafka.telemetry_topic, partitions, 10.0)
        committed = client.committed([TopicPartition(kafka.telemetry_topic, p) for p in partitions], timeout=10.0)
        return sum(ends[tp.partition][1] - max(tp.offset, ends[tp.partition][0]) for tp in committed)
    finally:
        client.close()
