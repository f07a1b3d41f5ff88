"""The chaos run's ledger: the faults injected (:class:`Event`) and every request answered or refused with a
reason, every telemetry record in a window, in the dead-letter topic, or counted as dropped with a reason —
and what is left unexplained; :func:`report` writes it all down.

Requests are counted as the client saw them. Telemetry is reconciled from the topics themselves once the
run has settled: every message of the telemetry topic is looked up in the worker's window table (its rows
carry the partition and offset of their record) and among the sources of the dead-letter topic; the
router's own counts (records delivered, failed, dropped or unusable) account for what never reached the
topic.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Message, TopicPartition

from headroom.contract.topics import SOURCE_HEADER, KafkaSettings
from headroom.demo.scrape import Samples, by_label, total
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
class Event:
    at_s: float
    fault: str
    detail: str = ""
    recovered_s: float | None = None  # kills and restarts: until the component does its work again


@dataclass
class Run:
    seconds: float
    events: list[Event] = field(default_factory=list)
    injected: dict[str, int] = field(default_factory=dict)
    unplanned_exits: list[str] = field(default_factory=list)
    requests: RequestLedger = field(default_factory=RequestLedger)


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
        key = message.key()
        if key is not None:  # a changelog entry without a key names no window
            table[key] = message.value()
    rows: set[tuple[int, int]] = set()
    for key, value in table.items():
        name = json.loads(key)
        if value is None or not isinstance(name, str) or name.startswith("hwm:"):
            continue
        _, _, _, partition = json.loads(name)
        rows.update((partition, row[3]) for row in json.loads(value)["rows"])
    return rows


def reconcile_telemetry(kafka: KafkaSettings, changelog_topic: str) -> TelemetryLedger:
    records = {_position(m) for m in read_to_end(kafka, kafka.telemetry_topic)}
    sources: Counter[tuple[int, int]] = Counter()
    for letter in read_to_end(kafka, kafka.dlq_topic):
        source = dict(letter.headers() or []).get(SOURCE_HEADER)
        if not isinstance(source, bytes):
            raise ValueError(f"dead letter {_position(letter)} of {kafka.dlq_topic} has no {SOURCE_HEADER} header")
        topic, partition, offset = source.decode().rsplit("/", 2)
        if topic == kafka.telemetry_topic:
            sources[(int(partition), int(offset))] += 1
    in_windows = window_rows(kafka, changelog_topic) & records
    dead = set(sources) & records
    return TelemetryLedger(on_topic=len(records), in_windows=len(in_windows), dead_lettered=len(dead),
                           unexplained=sorted(records - in_windows - dead),
                           dead_letter_duplicates=sum(n - 1 for n in sources.values()))


def _position(message: Message) -> tuple[int, int]:
    """A consumed message's partition and offset (which every consumed message has)."""
    partition, offset = message.partition(), message.offset()
    if partition is None or offset is None:
        raise ValueError("a consumed message came without its partition or offset")
    return partition, offset


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


def report(run: Run, seed: int, settled: bool, router: Samples, worker: Samples,
           telemetry: TelemetryLedger) -> dict[str, Any]:
    """The run's ledger as JSON: faults, requests, the router's and the worker's counts, telemetry reconciled."""
    delivery = {o: total(router, "headroom_router_telemetry_delivery_total", outcome=o)
                for o in ("delivered", "failed", "dropped")}
    unusable = total(router, "headroom_router_telemetry_records_total", outcome="unusable")
    requests = run.requests
    injected = sum(run.injected.values())
    return {
        "settled": settled, "seconds": run.seconds, "seed": seed,
        "faults": [dataclasses.asdict(e) for e in run.events],
        "unplanned_exits": run.unplanned_exits,
        "requests": {"sent": requests.sent, "answered": requests.answered, "cut_mid_stream": requests.cut,
                     "refused": dict(requests.refused), "unexplained": requests.unexplained[:20],
                     "unexplained_count": len(requests.unexplained)},
        "router": {**delivery, "unusable": unusable,
                   "retries": total(router, "headroom_router_upstream_retries_total"),
                   "ejections": total(router, "headroom_router_upstream_ejections_total"),
                   "heuristic_decisions": by_label(router, "headroom_router_heuristic_decisions_total", "reason")},
        "telemetry": {"injected": run.injected, "on_topic": telemetry.on_topic,
                      "router_delivered_plus_injected": delivery["delivered"] + injected,
                      "answered_minus_records": requests.answered - sum(delivery.values()) - unusable,
                      "in_windows": telemetry.in_windows, "dead_lettered": telemetry.dead_lettered,
                      "dead_letter_duplicates": telemetry.dead_letter_duplicates,
                      "unexplained": len(telemetry.unexplained), "unexplained_first": telemetry.unexplained[:20]},
        "worker": {"implausible": total(worker, "headroom_telemetry_implausible_total"),
                   "dead_letter_failures": total(worker, "headroom_telemetry_dead_letter_failures_total")},
    }
