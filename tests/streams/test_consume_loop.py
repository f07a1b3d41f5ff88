"""The consuming loop's bookkeeping without a broker: what it processes, when it writes the changelog."""

import asyncio
import json

import msgspec

from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.telemetry import encode
from headroom.contract.topics import KafkaSettings
from headroom.streams.consume import IngestLoop
from headroom.streams.ingest import build_ingestor
from headroom.streams.reader import Delivery, TelemetryReader
from headroom.streams.settings import PipelineSettings
from headroom.streams.window_rules import Row
from headroom.streams.windows import Windows, encode_row, entry_value
from headroom.trainer.publish import PublishError, PublishFenced
from tests.contract.records import valid_record
from tests.trainer.synthetic import synthetic_records

RECORDS_WALL_CLOCK = 1_700_000_100.0  # the test records completed within the minutes before it


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def flush(loop: IngestLoop, force: bool = False) -> dict[int, int]:
    return asyncio.run(loop.flush(force=force))


def loop_for(partitions, failures=(), **limits):
    """A loop over ``partitions`` whose changelog writes and dead letters are collected in lists; its first
    writes raise ``failures`` (one each)."""
    written, letters, clock, failures = [], [], Clock(), list(failures)
    reader = TelemetryReader(KafkaSettings(bootstrap_servers="127.0.0.1:1"), "unused", batch_records=10)  # never connects here
    async def write(partition, entries, dead_letters):
        if failures:
            raise failures.pop(0)
        written.append((partition, entries))
        letters.extend(dead_letters)

    loop = IngestLoop(build_ingestor(PipelineSettings(min_samples=10**9)), reader, write=write,
                      on_drift=lambda window: None, clock=clock, wall=lambda: RECORDS_WALL_CLOCK,
                      **limits)
    loop.owned = frozenset(partitions)
    return loop, written, letters, clock


def deliveries(partition: int, count: int, start: int = 0) -> list[Delivery]:
    records = synthetic_records(count, seed=partition, rate_per_s=100.0)
    return [Delivery(partition, start + i, None, encode(r)) for i, r in enumerate(records)]


def test_a_partition_is_written_once_it_has_enough_records():
    loop, written, _, _ = loop_for({0, 1}, flush_records=50, flush_interval_s=60.0)
    loop.process(deliveries(0, 60) + deliveries(1, 10))
    assert flush(loop) == {0: 60}
    assert [p for p, _ in written] == [0] and written[0][1][-1] == ("hwm:0", b"59")
    assert flush(loop) == {}


def test_a_quiet_partition_is_written_once_its_oldest_record_is_old_enough():
    loop, written, _, clock = loop_for({0}, flush_records=1000, flush_interval_s=1.0)
    loop.process(deliveries(0, 5))
    clock.now += 0.5
    loop.process(deliveries(0, 5, start=5))
    assert flush(loop) == {}
    clock.now += 0.5
    assert flush(loop) == {0: 10} and len(written) == 1


def test_a_forced_flush_writes_every_partition_and_partitions_no_longer_owned_are_ignored():
    loop, written, _, _ = loop_for({0, 1}, flush_records=1000, flush_interval_s=60.0)
    loop.process(deliveries(0, 3) + deliveries(1, 4))
    assert flush(loop, force=True) == {0: 3, 1: 4}
    loop.owned = frozenset()
    loop.process(deliveries(0, 3, start=3))
    assert loop.ingestor.windows.high_water == {0: 2, 1: 3} and len(written) == 2


def test_bad_records_are_dead_lettered_in_the_write_that_moves_the_high_water_mark_past_them():
    loop, written, letters, _ = loop_for({2}, flush_records=2, flush_interval_s=60.0)
    loop.process([Delivery(2, 0, b"k", b"{oops"), Delivery(2, 1, None, encode(valid_record()))])
    assert letters == []  # kept for the partition's next write
    assert flush(loop) == {2: 2}
    assert [(d.offset, d.value, d.key) for d, _ in letters] == [(0, b"{oops", b"k")]
    assert "not valid JSON" in letters[0][1]
    assert written[0][1][-1] == ("hwm:2", b"1")


def test_a_stratum_is_stored_as_the_same_json_whether_rows_carry_their_encoding_or_not():
    rows = [Row(1.5, 20.0, (0.5, 2.0), "0:7:ttft", 3, 0, 7), Row(2.0, 30.0, (0.25, 1.0), "0:9:ttft", 4, 0, 9)]
    encoded = [Row(*[getattr(r, f) for f in ("time", "value", "raw", "key", "seq", "partition", "offset")],
                   encode_row(r.time, r.value, r.seq, r.offset, r.raw)) for r in rows]
    expected = msgspec.json.encode({"schema": FEATURE_SCHEMA,
                                    "rows": [(r.time, r.value, r.seq, r.offset, *r.raw) for r in rows]})
    assert entry_value(rows) == entry_value(encoded) == expected
    assert json.loads(expected)["rows"] == [[1.5, 20.0, 3, 7, 0.5, 2.0], [2.0, 30.0, 4, 9, 0.25, 1.0]]


def test_restore_keeps_owned_partitions_and_drops_rows_past_the_high_water_mark():
    loop, written, _, _ = loop_for({0, 1}, flush_records=1000, flush_interval_s=60.0)
    loop.process(deliveries(0, 30) + deliveries(1, 30))
    table: dict = {}
    for partition in (0, 1):
        table.update(loop.ingestor.windows.flush(partition))
    table["hwm:0"] = b"19"  # as if the crash came after the rows of offsets 20-29 but before their mark
    restored = Windows(loop.ingestor.windows.limits)
    restored.restore(table.items(), partitions={0})
    assert restored.high_water == {0: 19}
    offsets = {row.offset for window in restored.keys() for rows in restored.copy(window).values() for row in rows}
    assert offsets == set(range(20))
    assert all(row.partition == 0 for w in restored.keys() for rows in restored.copy(w).values() for row in rows)


def test_a_write_that_fails_is_made_again_with_everything_it_held_at_the_next_flush():
    loop, written, letters, _ = loop_for({0}, failures=[PublishError("broker away")], flush_records=2,
                                         flush_interval_s=60.0)
    loop.process([Delivery(0, 0, None, b"{oops")] + deliveries(0, 2, start=1))
    assert flush(loop) == {} and written == [] and letters == []
    loop.process(deliveries(0, 1, start=3))
    assert flush(loop) == {0: 4}
    entries = written[0][1]
    assert ("hwm:0", b"2") in entries and entries[-1] == ("hwm:0", b"3")  # the failed write's, then the new ones
    assert len([key for key, _ in entries if key.startswith("[")]) >= 4  # two targets' strata, at least once
    assert [d.offset for d, _ in letters] == [0]


def test_a_fenced_write_gives_the_partition_up_and_keeps_the_others():
    loop, written, _, _ = loop_for({0, 1}, failures=[PublishFenced("taken over")], flush_records=1,
                                   flush_interval_s=60.0)
    loop.process(deliveries(0, 2) + deliveries(1, 2))
    try:
        assert flush(loop) == {1: 2}
        assert loop.owned == {1} and [p for p, _ in written] == [1]
        loop.process(deliveries(0, 2, start=2))
        assert loop.ingestor.windows.high_water[0] == 1  # records of a partition given up are not processed
    finally:
        asyncio.run(loop.reader.close())


def test_the_requests_behind_sampled_records_are_counted_by_their_weights():
    from dataclasses import replace

    from headroom.streams.metrics import WORKER
    loop, _, _, _ = loop_for({0}, flush_records=1000, flush_interval_s=60.0)
    records = synthetic_records(30, seed=5, rate_per_s=100.0)
    weighted = [replace(r, sample_weight=4.0 if i % 3 else 1.0) for i, r in enumerate(records)]
    before, records_before = WORKER.represented._value.get(), WORKER.ingested._value.get()
    loop.process([Delivery(0, i, None, encode(r)) for i, r in enumerate(weighted)])
    assert WORKER.ingested._value.get() - records_before == 30
    assert WORKER.represented._value.get() - before == 10 * 1.0 + 20 * 4.0
