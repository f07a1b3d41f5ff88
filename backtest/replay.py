"""Reading a range of a topic's history into memory, fast, without touching any consumer group's offsets.

The range is given per topic as a start (an offset, or a unix timestamp in ms resolved per partition with
``offsets_for_times``) and an end (the end offsets seen when the replay starts, or a timestamp). The
consumer is assigned partitions directly, never subscribes and never commits.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import polars as pl
from confluent_kafka import Consumer, KafkaException, TopicPartition

from contract.telemetry_frame import records_frame

BATCH = 20_000


@dataclass(frozen=True)
class Range:
    """Which part of history to read; ``None`` means from the beginning / up to the end seen at start."""

    start_ms: int | None = None
    end_ms: int | None = None
    start_offset: int | None = None  # applied to every partition; exclusive with start_ms


@dataclass(frozen=True)
class Replay:
    records: pl.DataFrame  # contract.telemetry_frame.COLUMNS + partition, offset, kafka_ts_ms
    rejected: list[tuple[int, int, str]]  # (partition, offset, reason)
    read: int
    seconds: float


def consumer(bootstrap: str, extra: dict[str, str] | None = None) -> Consumer:
    """A consumer that never commits: its group id is its own and auto-commit is off."""
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"headroom-replay-{uuid.uuid4().hex}",
                     "enable.auto.commit": False, "enable.partition.eof": False,
                     "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 16 * 1024 * 1024,
                     **(extra or {})})


def messages(client: Consumer, topic: str, span: Range = Range(),
             timeout_s: float = 10.0) -> Iterator[list]:
    """Batches of messages of ``topic`` within ``span``, until every partition reached its end."""
    starts, ends = _bounds(client, topic, span, timeout_s)
    pending = {p for p in ends if starts[p] < ends[p]}
    if not pending:
        return
    client.assign([TopicPartition(topic, p, starts[p]) for p in sorted(pending)])
    idle_since = time.monotonic()
    while pending:
        batch = client.consume(BATCH, timeout=0.5)
        if not batch:
            # Offsets without a message (transaction markers, compacted records) never arrive: the
            # consumer's position shows when a partition has passed its end all the same.
            for tp in client.position([TopicPartition(topic, p) for p in pending]):
                if tp.offset >= ends[tp.partition]:
                    pending.discard(tp.partition)
            if pending and time.monotonic() - idle_since > timeout_s:
                raise TimeoutError(f"no messages from {topic} for {timeout_s:.0f} s; partitions {sorted(pending)} "
                                   "did not reach their end offsets")
            continue
        idle_since = time.monotonic()
        kept = []
        for message in batch:
            if message.error():
                raise KafkaException(message.error())
            partition, offset = message.partition(), message.offset()
            if offset < ends.get(partition, -1) and partition in pending:
                kept.append(message)
                if offset + 1 >= ends[partition]:
                    pending.discard(partition)
        yield kept


def read_telemetry(bootstrap: str, topic: str, span: Range = Range(), extra: dict[str, str] | None = None,
                   progress: Callable[[int], None] | None = None) -> Replay:
    """Replay ``topic`` into a DataFrame of valid records (and the reasons of the invalid ones)."""
    began = time.monotonic()
    client = consumer(bootstrap, extra)
    frames, rejected, read = [], [], 0
    try:
        for batch in messages(client, topic, span):
            frame, bad = records_frame([m.value() for m in batch])
            bad_rows = {row for row, _ in bad}
            kept = [m for i, m in enumerate(batch) if i not in bad_rows] if bad else batch
            frames.append(frame.with_columns(
                pl.Series("partition", [m.partition() for m in kept], dtype=pl.Int32),
                pl.Series("offset", [m.offset() for m in kept], dtype=pl.Int64),
                pl.Series("kafka_ts_ms", [m.timestamp()[1] for m in kept], dtype=pl.Int64)))
            rejected += [(batch[row].partition(), batch[row].offset(), reason) for row, reason in bad]
            read += len(batch)
            if progress:
                progress(len(batch))
    finally:
        client.close()
    records = pl.concat(frames) if frames else records_frame([])[0].with_columns(
        pl.Series("partition", [], dtype=pl.Int32), pl.Series("offset", [], dtype=pl.Int64),
        pl.Series("kafka_ts_ms", [], dtype=pl.Int64))
    return Replay(records, rejected, read, time.monotonic() - began)


def _bounds(client: Consumer, topic: str, span: Range, timeout_s: float) -> tuple[dict[int, int], dict[int, int]]:
    metadata = client.list_topics(topic, timeout=timeout_s)
    if topic not in metadata.topics or metadata.topics[topic].error is not None:
        raise ValueError(f"topic {topic!r} does not exist on the broker")
    partitions = sorted(metadata.topics[topic].partitions)
    watermarks = {p: client.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s) for p in partitions}
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
