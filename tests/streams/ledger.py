"""What the workers of one app did, read back from the broker and from their logs: the ledger that the
scale-out tests check.

- Produced: every telemetry record with the partition and offset the broker gave it.
- Windows: the changelog's final table — which (partition, offset, target) rows the windows hold.
- Ownership: each worker's ``owning telemetry partitions`` / ``released telemetry partitions`` log lines,
  as intervals per partition (a killed worker's end at its kill).
- Versions: every message of ``model-updates`` in topic order with the time its producer wrote it, and each
  worker's ``publishing <key> v<N>`` lines, logged before the version's transaction commits (which say who
  may have written it: a worker killed right after committing has not logged ``promoted`` yet).
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime

from headroom import kafka_clients
from headroom.contract.model_update import decode_update
from headroom.contract.partitions import home_partition
from headroom.contract.targets import TARGETS, target_value
from headroom.contract.telemetry import TelemetryRecord, encode, partition_key
from headroom.contract.topics import KafkaSettings
from tests.keys import TRUST

LOG_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] \[(\d+)\] \[\w+\] (.*)$")
OWNING = re.compile(r"^owning telemetry partitions \[([\d, ]*)\]")
RELEASED = re.compile(r"^released telemetry partitions \[([\d, ]*)\]")
PROMOTED = re.compile(r"^promoted (\S+) v(\d+) ")
PUBLISHING = re.compile(r"^publishing (\S+) v(\d+)\s*$")


def pools_covering(partitions: int, per_partition: int) -> list[str]:
    """Pool keys, ``per_partition`` of them homed in each telemetry partition."""
    homed: dict[int, list[str]] = defaultdict(list)
    n = 0
    while any(len(homed[p]) < per_partition for p in range(partitions)):
        pool = f"pool-{n}"
        if len(homed[home_partition(pool, partitions)]) < per_partition:
            homed[home_partition(pool, partitions)].append(pool)
        n += 1
    return sorted(pool for pools in homed.values() for pool in pools)


def produce(kafka: KafkaSettings, records: list[TelemetryRecord],
            produced: dict[tuple[int, int], TelemetryRecord]) -> None:
    """Send ``records`` as a router does (keyed by pool) and note where each landed in ``produced``."""
    client = kafka_clients.producer(kafka, {"linger.ms": 10, "enable.idempotence": True})
    failures: list[object] = []

    def delivered(err, message, record):
        if err is not None:
            failures.append(err)
        else:
            produced[(message.partition(), message.offset())] = record

    for record in records:
        client.produce(kafka.telemetry_topic, key=partition_key(record), value=encode(record),
                       on_delivery=lambda err, message, record=record: delivered(err, message, record))
        client.poll(0)
    assert client.flush(30) == 0 and not failures, failures


def read_committed(kafka: KafkaSettings, topic: str, timeout_s: float = 30.0) -> list:
    """Every committed message of ``topic`` (all partitions), read up to each partition's end."""
    return kafka_clients.read_to_end(kafka, topic, timeout_s)


def window_rows(kafka: KafkaSettings, changelog_topic: str) -> tuple[Counter, dict[int, int]]:
    """The windows the changelog describes: a count per (partition, offset, target) row, and the high-water
    marks."""
    table: dict[str, bytes] = {}
    for message in read_committed(kafka, changelog_topic):
        key = json.loads(message.key())
        if message.value() is None:
            table.pop(key, None)
        else:
            table[key] = message.value()
    rows: Counter = Counter()
    marks = {}
    for key, value in table.items():
        if key.startswith("hwm:"):
            marks[int(key[4:])] = json.loads(value)
            continue
        _, target, _, partition = json.loads(key)
        for row in json.loads(value)["rows"]:
            rows[(partition, row[3], target)] += 1
    return rows, marks


def expected_rows(produced: dict[tuple[int, int], TelemetryRecord]) -> Counter:
    """One row per target each produced record has a value for."""
    return Counter({(p, o, target): 1 for (p, o), record in produced.items() for target in TARGETS
                    if target_value(record, target) is not None})


def published(kafka: KafkaSettings) -> list[tuple[str, int, float]]:
    """(model key, version, when its producer wrote it) of every message on ``model-updates``, in topic order."""
    out = []
    for message in read_committed(kafka, kafka.model_topic):
        update = decode_update(message.value(), TRUST)
        out.append((update.key, update.version, message.timestamp()[1] / 1000.0))
    return out


def versions_by_key(kafka: KafkaSettings) -> dict[str, list[int]]:
    """The versions on ``model-updates`` per model key, in topic order."""
    out: dict[str, list[int]] = defaultdict(list)
    for key, version, _ in published(kafka):
        out[key].append(version)
    return dict(out)


@dataclass(frozen=True)
class Event:
    time: float
    pid: int
    kind: str  # own | release | publish (attempted) | promote (committed)
    partitions: frozenset[int] = frozenset()
    key: str = ""
    version: int = 0


def events(log: str) -> list[Event]:
    """The ownership and promotion events of one worker's log."""
    found = []
    for line in log.splitlines():
        match = LOG_LINE.match(line)
        if match is None:
            continue
        stamp = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        pid, message = int(match[2]), match[3]
        if owning := OWNING.match(message):
            found.append(Event(stamp, pid, "own", _partitions(owning[1])))
        elif released := RELEASED.match(message):
            found.append(Event(stamp, pid, "release", _partitions(released[1])))
        elif promoted := PROMOTED.match(message):
            found.append(Event(stamp, pid, "promote", key=promoted[1], version=int(promoted[2])))
        elif publishing := PUBLISHING.match(message):
            found.append(Event(stamp, pid, "publish", key=publishing[1], version=int(publishing[2])))
    return found


def _partitions(text: str) -> frozenset[int]:
    return frozenset(int(p) for p in text.split(",") if p.strip())


def ownership(logs: list[str], ends: dict[int, float]) -> dict[int, list[tuple[float, float, int]]]:
    """Per partition, the (start, end, pid) intervals of each worker's ownership; a worker's last interval
    ends at ``ends[pid]`` (its kill or stop) when its log does not close it."""
    intervals: dict[int, list[tuple[float, float, int]]] = defaultdict(list)
    for log in logs:
        held: dict[int, float] = {}
        pid = 0
        for event in events(log):
            pid = event.pid
            if event.kind == "own":
                held = {p: event.time for p in event.partitions}
            elif event.kind == "release":
                for p, start in held.items():
                    intervals[p].append((start, event.time, pid))
                held = {}
        for p, start in held.items():
            intervals[p].append((start, ends.get(pid, float("inf")), pid))
    return {p: sorted(spans) for p, spans in intervals.items()}


def overlaps(intervals: dict[int, list[tuple[float, float, int]]]) -> list[tuple[int, tuple, tuple]]:
    """Pairs of intervals of one partition held by two workers at once."""
    found = []
    for partition, spans in intervals.items():
        for earlier, later in zip(spans, spans[1:]):
            if later[0] < earlier[1] and later[2] != earlier[2]:
                found.append((partition, earlier, later))
    return found


def owner_at(intervals: dict[int, list[tuple[float, float, int]]], partition: int, when: float) -> set[int]:
    return {pid for start, end, pid in intervals.get(partition, []) if start <= when <= end}


def owned_now(worker) -> frozenset[int] | None:
    """The partitions of the worker's last ownership event (None before the first)."""
    found = [e for e in events(worker.log()) if e.kind in ("own", "release")]
    return (found[-1].partitions if found[-1].kind == "own" else frozenset()) if found else None


def share_all(workers: list, partitions: int) -> bool:
    """Whether the workers' current ownerships are disjoint and cover every partition."""
    held = [owned_now(w) or frozenset() for w in workers]
    return sum(map(len, held)) == partitions and frozenset().union(*held) == frozenset(range(partitions))
