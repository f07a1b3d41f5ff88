"""Reading a range of a topic's history into memory, fast, without touching any consumer group's offsets.

The range is given per topic as a start (an offset, or a unix timestamp in ms resolved per partition with
``offsets_for_times``) and an end (the end offsets seen when the replay starts, or a timestamp). Consumers
are assigned partitions directly, never subscribe and never commit.

:func:`read_telemetry` reads the partitions side by side: up to ``workers`` consumers, each with its share
of the partitions in its own thread, each turning its batches into columns as they arrive (librdkafka and
polars' parser run outside the GIL, so one worker's fetching and parsing overlap another's bookkeeping).
The records come back in partition and offset order, whatever the timing of the workers.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import polars as pl
from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from headroom import kafka_clients
from headroom.contract.signing import TrustedKeys
from headroom.contract.telemetry_frame import SCHEMA, records_frame
from headroom.contract.topics import KafkaSettings

BATCH = 20_000
FIRST_BATCH = 2_500  # batches double from this size up to BATCH
# Consumers reading partitions side by side: one per two cores (a worker keeps about two busy, with
# polars' parser and librdkafka's fetcher), at most four.
WORKERS = max(1, min(4, (os.cpu_count() or 2) // 2))
PREFETCH_KB = 64 * 1024  # librdkafka's prefetch queues, shared out among the workers
POSITION_COLUMNS = {"partition": pl.Int32, "offset": pl.Int64, "kafka_ts_ms": pl.Int64}
# librdkafka's own log lines of every backtest client, with the notes of a broker still starting lowered to debug
LIBRDKAFKA_LOG = kafka_clients.librdkafka_logger("headroom.backtest")


@dataclass(frozen=True)
class Range:
    """Which part of history to read; ``None`` means from the beginning / up to the end seen at start."""

    start_ms: int | None = None
    end_ms: int | None = None
    start_offset: int | None = None  # applied to every partition; exclusive with start_ms


@dataclass(frozen=True)
class Source:
    """Where history is read from: the broker, its topics, the keys published models must be signed by, the
    range, extra librdkafka settings."""

    kafka: KafkaSettings
    trust: TrustedKeys
    span: Range = Range()
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Replay:
    records: pl.DataFrame  # contract.telemetry_frame.COLUMNS + partition, offset, kafka_ts_ms
    rejected: list[tuple[int, int, str]]  # (partition, offset, reason), in partition and offset order
    read: int
    seconds: float
    starts: dict[int, int] = field(default_factory=dict)  # per partition: the range read, [start, end)
    ends: dict[int, int] = field(default_factory=dict)


def consumer(kafka: KafkaSettings, extra: Mapping[str, Any] | None = None) -> Consumer:
    """A consumer that never commits: its group id is its own and auto-commit is off."""
    # Moderate fetches start the flow of records sooner; a short queue backoff keeps a full prefetch
    # queue from pausing the fetcher for a second (librdkafka's default) each time it fills.
    return kafka_clients.consumer(kafka, "headroom-replay", {
        "logger": LIBRDKAFKA_LOG, "enable.partition.eof": False, "fetch.max.bytes": 16 * 1024 * 1024,
        "max.partition.fetch.bytes": 4 * 1024 * 1024, "fetch.queue.backoff.ms": 10, **(extra or {})})


def read_telemetry(kafka: KafkaSettings, topic: str, span: Range = Range(), extra: Mapping[str, Any] | None = None,
                   progress: Callable[[int], None] | None = None, workers: int = WORKERS,
                   timeout_s: float = 10.0, partitions: Collection[int] | None = None,
                   on_total: Callable[[int], None] | None = None) -> Replay:
    """Replay ``topic`` (only ``partitions`` of it, when given) into a DataFrame of valid records (and the
    reasons of the invalid ones); ``on_total`` hears how many offsets the range spans once it is known."""
    began = time.monotonic()
    client = consumer(kafka, extra)
    try:
        starts, ends = _bounds(client, topic, span, timeout_s)
    finally:
        client.close()
    if partitions is not None:
        starts = {p: offset for p, offset in starts.items() if p in partitions}
        ends = {p: offset for p, offset in ends.items() if p in partitions}
    if on_total:
        on_total(sum(max(ends[p] - starts[p], 0) for p in ends))
    with _cyclic_gc_paused():
        parts = _read_shares(kafka, topic, starts, ends, extra, progress, workers, timeout_s)
    frames = [frame for part in parts for frame in part.frames]
    records = pl.concat(frames) if frames else pl.DataFrame(schema={**SCHEMA, **POSITION_COLUMNS})
    rejected = sorted(reject for part in parts for reject in part.rejected)
    return Replay(records.sort(["partition", "offset"]), rejected, sum(part.read for part in parts),
                  time.monotonic() - began, starts, ends)


def _read_shares(kafka: KafkaSettings, topic: str, starts: dict[int, int], ends: dict[int, int],
                 extra: Mapping[str, Any] | None, progress: Callable[[int], None] | None, workers: int,
                 timeout_s: float) -> list[_Share]:
    """The partitions dealt out to up to ``workers`` consumers, each read in its own thread."""
    pending = [p for p in sorted(ends) if starts[p] < ends[p]]
    count = min(max(workers, 1), len(pending))
    shares = [pending[i::count] for i in range(count)]
    config = {"queued.max.messages.kbytes": str(max(PREFETCH_KB // max(count, 1), 1024)), **(extra or {})}
    counted = threading.Lock()

    def report(records: int) -> None:
        if progress:
            with counted:
                progress(records)

    stop = threading.Event()
    with ThreadPoolExecutor(max(count, 1), thread_name_prefix="replay") as pool:
        futures = [pool.submit(_read_share, kafka, config, topic, {p: (starts[p], ends[p]) for p in share},
                               timeout_s, stop, report) for share in shares]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:
            stop.set()  # one worker failed (or this thread was interrupted): the others stop early
        return [future.result() for future in futures]


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a replay reads: it allocates millions of objects that live a
    batch and form no cycles (messages, their values), and each full collection would walk the whole heap."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class _Batch:
    """Messages below their partition's end, and their positions as columns."""

    messages: list[Message]
    values: list[bytes | None]  # None: a record without a value, which the parser rejects
    partitions: list[int]
    offsets: list[int]
    timestamps: list[int]


@dataclass(frozen=True)
class _Share:
    frames: list[pl.DataFrame]
    rejected: list[tuple[int, int, str]]
    read: int


def _read_share(kafka: KafkaSettings, config: dict[str, Any], topic: str, bounds: dict[int, tuple[int, int]],
                timeout_s: float, stop: threading.Event, report: Callable[[int], None]) -> _Share:
    """One worker: its partitions from start to end, as frames of valid records and the rejects."""
    client = consumer(kafka, config)
    frames, rejected, read = [], [], 0
    try:
        for batch in _batches(client, topic, bounds, timeout_s, stop):
            frame, bad = records_frame(batch.values)
            positions = pl.DataFrame([pl.Series(name, column, dtype=dtype) for (name, dtype), column in zip(
                POSITION_COLUMNS.items(), (batch.partitions, batch.offsets, batch.timestamps))])
            if bad:
                rejected += [(batch.partitions[row], batch.offsets[row], reason) for row, reason in bad]
                positions = positions.filter(~pl.int_range(pl.len()).is_in([row for row, _ in bad]))
            frames.append(pl.concat([frame, positions], how="horizontal"))
            read += len(batch.values)
            report(len(batch.values))
    finally:
        client.close()
    return _Share(frames, rejected, read)


def _batches(client: Consumer, topic: str, bounds: dict[int, tuple[int, int]], timeout_s: float,
             stop: threading.Event) -> Iterator[_Batch]:
    """Batches of the partitions in ``bounds`` (start, end offsets), until each reached its end."""
    ends = {p: end for p, (start, end) in bounds.items() if start < end}
    if not ends:
        return
    client.assign([TopicPartition(topic, p, bounds[p][0]) for p in sorted(ends)])
    following = {p: bounds[p][0] for p in ends}  # the next offset each partition should deliver
    size = FIRST_BATCH
    idle_since = time.monotonic()
    while following and not stop.is_set():
        # A small first batch starts the work while the fetcher is still filling up; asking for no more
        # than is left lets the last batch return as soon as it is complete.
        wanted = min(size, sum(ends[p] - offset for p, offset in following.items()))
        size = min(2 * size, BATCH)
        messages = client.consume(max(wanted, 1), timeout=0.5)
        if not messages:
            # Offsets without a message (transaction markers, compacted records) never arrive: the
            # consumer's position shows when a partition has passed its end all the same.
            for tp in client.position([TopicPartition(topic, p) for p in following]):
                if tp.offset >= ends[tp.partition]:
                    del following[tp.partition]
            if following and time.monotonic() - idle_since > timeout_s:
                raise TimeoutError(f"no messages from {topic} for {timeout_s:.0f} s; partitions "
                                   f"{sorted(following)} did not reach their end offsets")
            continue
        idle_since = time.monotonic()
        for error in filter(None, map(Message.error, messages)):
            raise KafkaException(error)
        partitions, offsets = _positions(messages, topic)
        last = dict(zip(partitions, offsets))  # each partition's newest offset in this batch
        if any(offset >= ends[p] for p, offset in last.items()):  # past the end: cut off
            messages = [m for m, p, offset in zip(messages, partitions, offsets) if offset < ends[p]]
            partitions, offsets = _positions(messages, topic)
        for p, offset in last.items():
            if p in following:
                following[p] = offset + 1
        done = [p for p, offset in following.items() if offset >= ends[p]]
        if done:
            client.pause([TopicPartition(topic, p) for p in done])
            for p in done:
                del following[p]
        yield _Batch(messages, list(map(Message.value, messages)), partitions, offsets,
                     [timestamp for _, timestamp in map(Message.timestamp, messages)])


def _positions(messages: list[Message], topic: str) -> tuple[list[int], list[int]]:
    """The messages' partitions and offsets; every consumed record has both, so one without is refused."""
    partitions, offsets = list(map(Message.partition, messages)), list(map(Message.offset, messages))
    if not (_all_known(partitions) and _all_known(offsets)):
        raise KafkaException(f"the client delivered a message of {topic} without its partition or offset")
    return partitions, offsets


def _all_known(values: list[int | None]) -> TypeGuard[list[int]]:
    return None not in values  # one pass in C per batch: about 0.1 µs a record


def _bounds(client: Consumer, topic: str, span: Range, timeout_s: float) -> tuple[dict[int, int], dict[int, int]]:
    metadata = client.list_topics(topic, timeout=timeout_s)
    if topic not in metadata.topics or metadata.topics[topic].error is not None:
        raise ValueError(f"topic {topic!r} does not exist on the broker")
    partitions = sorted(metadata.topics[topic].partitions)
    watermarks = kafka_clients.watermarks(client, topic, partitions, timeout_s)
    starts = {p: low for p, (low, _) in watermarks.items()}
    ends = {p: high for p, (_, high) in watermarks.items()}
    if span.start_offset is not None:
        starts = {p: max(starts[p], span.start_offset) for p in partitions}
    if span.start_ms is not None:
        starts = _offsets_at(client, topic, partitions, span.start_ms, ends, timeout_s)
    if span.end_ms is not None:
        ends = _offsets_at(client, topic, partitions, span.end_ms, ends, timeout_s)
    return starts, ends


def _offsets_at(client: Consumer, topic: str, partitions: list[int], ts_ms: int, ends: dict[int, int],
                timeout_s: float) -> dict[int, int]:
    """The first offset at or after ``ts_ms`` per partition (the end offset when there is none)."""
    found = client.offsets_for_times([TopicPartition(topic, p, ts_ms) for p in partitions], timeout=timeout_s)
    return {tp.partition: (ends[tp.partition] if tp.offset < 0 else tp.offset) for tp in found}
