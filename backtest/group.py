"""A backtest split across workers the way Kafka splits the topic: by partition, hence by pool.

Every worker (``headroom backtest worker --group G --parts DIR``) joins the consumer group ``G`` on the
telemetry topic and waits until its assignment has not changed for ``settle_s`` (so workers started together
share the partitions out once). It pauses its assigned partitions (the group only deals them out: records are
read by assignment, :func:`backtest.replay.read_telemetry`), skips those the group has a committed offset for
(their part is written), and replays the rest with the prequential evaluation — each pool on its own, so a
pool's part is the same whoever computes it. It writes one part per partition into ``DIR/partition-<p>``
(written aside, then renamed into place) and commits the partition's end offset to ``G``: the group's lag is
the history not yet backtested. Partitions it lost in a rebalance while it worked (a worker joined late) are left
to their new owner; partitions it gained are done next. It stays in the group until every partition of the
topic is done, so a worker that dies leaves its partitions to the others (or to a worker started later).

``headroom backtest merge --parts DIR`` joins the parts into one report (:func:`merge`): every partition of
the topic must have its part, all made with the same range and pipeline settings, and no pool may have
records in two partitions (telemetry is keyed by pool, :func:`contract.telemetry.partition_key`; a history
written otherwise cannot be split by partition, and the worker or the merge says so).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from confluent_kafka import Consumer, KafkaException, TopicPartition

from headroom import kafka_clients
from headroom.backtest import published
from headroom.backtest.prequential import Prequential, evaluate
from headroom.backtest.replay import LIBRDKAFKA_LOG, Range, Source, read_telemetry
from headroom.streams.settings import PipelineSettings

TABLES = ("rounds", "drifts", "errors", "versions", "usage")
PART_FILE = "part.json"


class SplitError(ValueError):
    """A history that cannot be split by partition, or parts that do not make one backtest."""


@dataclass(frozen=True)
class Part:
    """One partition's share of a backtest."""

    partition: int
    meta: dict[str, Any]  # topic, partitions, range, start/end offsets, records, rejected, settings, seconds, ...
    tables: dict[str, pl.DataFrame]  # TABLES, each of the partition's pools only


def describe_settings(pipeline: PipelineSettings, span: Range) -> str:
    """What parts must agree on to be merged: the pipeline settings and the range."""
    return repr((pipeline, span))


# --- the worker --------------------------------------------------------------------------------------------


class Membership:
    """This worker's place in the group: the partitions assigned to it (paused: read by assignment elsewhere),
    kept alive by a thread that polls the group consumer."""

    def __init__(self, source: Source, group: str, settle_s: float):
        self.topic = source.kafka.telemetry_topic
        self.settle_s = settle_s
        self.assigned: set[int] = set()
        self.changed_at = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.consumer: Consumer = kafka_clients.group_consumer(source.kafka, group, {
            "logger": LIBRDKAFKA_LOG, "partition.assignment.strategy": "range", "session.timeout.ms": 10_000,
            "max.poll.interval.ms": 3_600_000, **source.extra})
        self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        consumer.pause(partitions)
        with self._lock:
            self.assigned = {tp.partition for tp in partitions}
            self.changed_at = time.monotonic()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self._lock:
            self.assigned -= {tp.partition for tp in partitions}
            self.changed_at = time.monotonic()

    def settled(self, timeout_s: float) -> set[int]:
        """The assignment once it has not changed for ``settle_s`` (polling in this thread)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.consumer.poll(0.2)
            with self._lock:
                quiet = time.monotonic() - self.changed_at >= self.settle_s
                if quiet and (self.assigned or time.monotonic() > deadline):
                    return set(self.assigned)
            if time.monotonic() > deadline + timeout_s:
                raise TimeoutError(f"no stable assignment of {self.topic!r} within {2 * timeout_s:.0f} s")

    def done(self, partitions: set[int]) -> set[int]:
        """Those of ``partitions`` the group has a committed offset for (their parts are written)."""
        if not partitions:
            return set()
        found = self.consumer.committed([TopicPartition(self.topic, p) for p in sorted(partitions)], timeout=10.0)
        return {tp.partition for tp in found if tp.offset >= 0}

    def keep_alive(self) -> None:
        """Poll the group consumer in a thread (heartbeats, rebalances) until :meth:`hold`."""
        self._stop.clear()
        self._thread = threading.Thread(target=self._poll, name="backtest-group", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            self.consumer.poll(0.5)

    def hold(self) -> set[int]:
        """Stop the polling thread; the partitions assigned now."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            return set(self.assigned)

    def commit(self, ends: dict[int, int]) -> None:
        if not ends:
            return
        self.consumer.commit(offsets=[TopicPartition(self.topic, p, max(end, 0)) for p, end in sorted(ends.items())],
                             asynchronous=False)

    def close(self) -> None:
        self.hold()
        self.consumer.close()


def run_worker(source: Source, pipeline: PipelineSettings, parts_dir: Path, group: str, *, processes: int,
               settle_s: float = 3.0, timeout_s: float = 60.0,
               progress: Callable[[str], None] = lambda _: None) -> list[int]:
    """Backtest the partitions the group assigns this worker, a part each (see the module docstring); returns
    the partitions whose parts it wrote."""
    parts_dir.mkdir(parents=True, exist_ok=True)
    membership = Membership(source, group, settle_s)
    written: list[int] = []
    everything = set(range(_partition_count(source)))
    try:
        while True:
            assigned = membership.settled(timeout_s)
            todo = assigned - membership.done(assigned)
            if not todo:
                if membership.done(everything) == everything:
                    return written
                membership.consumer.poll(1.0)  # stay in the group while others work: theirs come here if they die
                continue
            progress(f"partitions {sorted(todo)} of {source.kafka.telemetry_topic!r}")
            membership.keep_alive()
            parts = backtest_partitions(source, pipeline, todo, processes)
            still = membership.hold()
            for part in parts:
                if part.partition in still:  # one lost in a rebalance is its new owner's
                    write_part(parts_dir, part)
                    written.append(part.partition)
            try:
                membership.commit({p.partition: p.meta["end"] for p in parts if p.partition in still})
            except KafkaException as err:  # a rebalance came between: those partitions are done again, the same
                progress(f"committing partitions {sorted(still & todo)} failed ({err}); they stay to do")
    finally:
        membership.close()


def backtest_partitions(source: Source, pipeline: PipelineSettings, partitions: set[int], processes: int,
                        progress: Any = None) -> list[Part]:
    """The prequential evaluation of ``partitions``, as one part per partition."""
    began = time.perf_counter()
    replay = read_telemetry(source.kafka, source.kafka.telemetry_topic, source.span, source.extra,
                            partitions=partitions)
    read_seconds = time.perf_counter() - began
    records = replay.records
    homes = records.group_by("pool_key").agg(pl.col("partition").unique().sort()).sort("pool_key")
    for pool_key, found in homes.iter_rows():
        if len(found) > 1:
            raise SplitError(f"pool {pool_key!r} has records in partitions {found} of "
                             f"{source.kafka.telemetry_topic!r}: the telemetry was not keyed by pool, so a backtest "
                             f"split by partition cannot replay the pool whole; run 'headroom backtest run' instead")
    outcome = evaluate(records, pipeline, progress, processes=processes)
    usage = published.usage(records)
    total = _partition_count(source)
    parts = []
    for partition in sorted(partitions):
        mine = records.filter(pl.col("partition") == partition)
        pools = sorted(mine.get_column("pool_key").unique().to_list())
        of_pools = pl.col("pool_key").is_in(pools)
        tables = {"rounds": outcome.rounds.filter(of_pools), "drifts": outcome.drifts.filter(of_pools),
                  "errors": outcome.errors.filter(of_pools), "versions": outcome.versions.filter(of_pools),
                  "usage": usage.filter(of_pools)}
        ts = mine.get_column("completion_ts")
        meta = {"topic": source.kafka.telemetry_topic, "bootstrap": source.kafka.bootstrap_servers,
                "partitions": total, "partition": partition, "settings": describe_settings(pipeline, source.span),
                "span": [source.span.start_ms, source.span.end_ms, source.span.start_offset],
                "start": replay.starts.get(partition, 0), "end": replay.ends.get(partition, 0),
                "records": mine.height, "rejected": sum(1 for p, _, _ in replay.rejected if p == partition),
                "first_ts": ts.min(), "last_ts": ts.max(), "pools": pools, "worker": f"{socket.gethostname()}:"
                f"{os.getpid()}", "seconds": {"read": read_seconds, "prepare": outcome.prepare_seconds,
                                             "replay": outcome.replay_seconds, "training": outcome.training_seconds,
                                             "training_cpu": outcome.training_cpu_seconds,
                                             "scoring": outcome.scoring_seconds}}
        parts.append(Part(partition, meta, tables))
    return parts


def _partition_count(source: Source) -> int:
    client = kafka_clients.consumer(source.kafka, "headroom-backtest-meta", {"logger": LIBRDKAFKA_LOG})
    try:
        return len(kafka_clients.wait_for_partitions(client, source.kafka.telemetry_topic, 10.0))
    finally:
        client.close()


# --- parts on disk -------------------------------------------------------------------------------------------


def write_part(parts_dir: Path, part: Part) -> Path:
    """``parts_dir/partition-<p>``: the tables as parquet and ``part.json``, written aside and renamed into place."""
    final = parts_dir / f"partition-{part.partition}"
    aside = parts_dir / f".partition-{part.partition}-{os.getpid()}"
    shutil.rmtree(aside, ignore_errors=True)
    aside.mkdir(parents=True)
    for name in TABLES:
        part.tables[name].write_parquet(aside / f"{name}.parquet")
    (aside / PART_FILE).write_text(json.dumps(part.meta, indent=1, sort_keys=True))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(aside, final)
    return final


def read_parts(parts_dir: Path) -> list[Part]:
    parts = []
    for folder in sorted(parts_dir.glob("partition-*")):
        meta = json.loads((folder / PART_FILE).read_text())
        parts.append(Part(meta["partition"], meta, {name: pl.read_parquet(folder / f"{name}.parquet")
                                                    for name in TABLES}))
    return parts


@dataclass(frozen=True)
class Merged:
    prequential: Prequential
    usage: pl.DataFrame
    meta: dict[str, Any]  # what the parts agree on: topic, bootstrap, partitions, settings, span
    rejected: int
    seconds: dict[str, float]  # summed over the parts


def merge(parts: list[Part]) -> Merged:
    """The parts as one prequential evaluation (see the module docstring for what they must agree on)."""
    if not parts:
        raise SplitError("no parts to merge")
    first = parts[0].meta
    for part in parts:
        for key in ("topic", "partitions", "settings"):
            if part.meta[key] != first[key]:
                raise SplitError(f"partition {part.partition}'s part was made with another {key} "
                                 f"({part.meta[key]!r}, not {first[key]!r}): it belongs to another backtest")
    missing = sorted(set(range(first["partitions"])) - {part.partition for part in parts})
    if missing:
        raise SplitError(f"partitions {missing} of {first['topic']!r} have no part yet: a worker of the group has "
                         f"not finished them; start one ('headroom backtest worker') and merge again")
    pools: dict[str, int] = {}
    for part in parts:
        for pool in part.meta["pools"]:
            if pools.setdefault(pool, part.partition) != part.partition:
                raise SplitError(f"pool {pool!r} has records in partitions {pools[pool]} and {part.partition}: the "
                                 f"telemetry was not keyed by pool, so its parts cannot be merged; run "
                                 f"'headroom backtest run' instead")

    def joined(name: str, by: list[str]) -> pl.DataFrame:
        return pl.concat([part.tables[name] for part in parts], how="vertical_relaxed").sort(by, maintain_order=True)

    seconds: dict[str, float] = {}
    for part in parts:
        for stage, value in part.meta["seconds"].items():
            seconds[stage] = seconds.get(stage, 0.0) + value
    firsts = [p.meta["first_ts"] for p in parts if p.meta["first_ts"] is not None]
    lasts = [p.meta["last_ts"] for p in parts if p.meta["last_ts"] is not None]
    prequential = Prequential(
        rounds=joined("rounds", ["pool_key", "round"]), drifts=joined("drifts", ["pool_key", "pool_record"]),
        errors=joined("errors", ["pool_key", "pool_record"]), versions=joined("versions", ["pool_key"]),
        records=sum(p.meta["records"] for p in parts), first_ts=min(firsts) if firsts else None,
        last_ts=max(lasts) if lasts else None, prepare_seconds=seconds.get("prepare", 0.0),
        replay_seconds=seconds.get("replay", 0.0), training_seconds=seconds.get("training", 0.0),
        training_cpu_seconds=seconds.get("training_cpu", 0.0), scoring_seconds=seconds.get("scoring", 0.0))
    return Merged(prequential, joined("usage", ["pool_key", "target", "version"]),
                  {k: first[k] for k in ("topic", "bootstrap", "partitions", "settings", "span")},
                  sum(p.meta["rejected"] for p in parts), seconds)
