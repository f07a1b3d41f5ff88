"""The worker's consuming loop: telemetry batches in; window rows, dead letters and changelog writes out.

The loop reads only the telemetry partitions the worker owns (:meth:`IngestLoop.own`, called once the
window table has been recovered for them), each from one past its high-water mark, so a record already
in a window is never read into it again. A batch is processed without yielding to the event loop, then
each partition whose unflushed records reached ``flush_records``, or whose oldest unflushed record is
``flush_interval_s`` old, is written: its dead letters, window changes and high-water mark, in one
transaction of the partition's owner (:mod:`streams.ownership`), so a high-water mark never moves past a
bad record that is not in the dead-letter topic. A partition whose write is fenced (another worker owns
it now) is dropped at once; a write that fails otherwise is tried again at the next flush. Before a
rebalance takes partitions away, :meth:`IngestLoop.release` writes everything and stops reading, so the
next owner recovers a window consistent with its high-water mark.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from headroom.streams.ingest import Ingestor
from headroom.streams.metrics import WORKER
from headroom.streams.reader import Delivery, TelemetryReader
from headroom.streams.windows import WindowKey
from headroom.trainer.publish import PublishError, PublishFenced

log = logging.getLogger(__name__)

Entries = list[tuple[str, bytes | None]]  # table entries (key, JSON value; None deletes the key)
Letters = list[tuple[Delivery, str]]  # dead letters: (original message, reason)
PartitionWriter = Callable[[int, Entries, Letters], Awaitable[None]]  # one transaction of the partition's owner


class IngestLoop:
    def __init__(self, ingestor: Ingestor, reader: TelemetryReader, *, flush_records: int, flush_interval_s: float,
                 write: PartitionWriter, on_drift: Callable[[WindowKey], None],
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 idle_wait_s: float = 0.1):
        self.ingestor = ingestor
        self.reader = reader
        self.flush_records = flush_records
        self.flush_interval_s = flush_interval_s
        self.idle_wait_s = idle_wait_s  # longest wait for telemetry before checking flushes again
        self._write = write
        self._on_drift = on_drift
        self._clock = clock
        self._wall = wall  # records are checked against it (streams.window_rules.implausible)
        self.owned: frozenset[int] = frozenset()
        self._generation = 0  # bumped on every ownership change; a fetch that spans one is dropped
        self._owned_changed = asyncio.Event()
        self._flushing = asyncio.Lock()
        self._unflushed: dict[int, int] = {}  # partition -> records processed since its last flush
        self._oldest: dict[int, float] = {}  # partition -> when its oldest unflushed record was processed
        self._letters: dict[int, Letters] = {}  # partition -> dead letters since its last write
        self._pending: dict[int, Entries] = {}  # partition -> entries of a write that failed, to write again

    # --- ownership ------------------------------------------------------------------------------------

    async def own(self, partitions: Iterable[int]) -> None:
        """Read ``partitions`` from one past their high-water marks (the windows must be restored first)."""
        self.owned = frozenset(partitions)
        self._generation += 1
        for state in (self._unflushed, self._oldest, self._letters, self._pending):
            state.clear()
        await self._read_owned()
        self._owned_changed.set()
        log.info("reading telemetry partitions %s", sorted(self.owned))

    async def _read_owned(self) -> None:
        high_water = self.ingestor.windows.high_water
        await self.reader.assign({p: high_water[p] + 1 if p in high_water else None for p in self.owned})

    async def release(self) -> None:
        """Write every partition's window changes, then stop reading."""
        await self.flush(force=True)
        self.owned = frozenset()
        self._generation += 1
        await self.reader.assign({})

    # --- the loop -------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Fetch, process and flush until cancelled."""
        while True:
            if not self.owned:
                self._owned_changed.clear()
                await self._owned_changed.wait()
                continue
            generation = self._generation
            batch = await self.reader.fetch(self.idle_wait_s)
            if generation != self._generation:
                continue  # ownership changed meanwhile: these records will be read again by their owner
            self.process(batch)
            flushed = await self.flush()
            if flushed:
                await self.reader.commit(flushed)

    def process(self, batch: Iterable[Delivery]) -> None:
        """Ingest a batch of owned partitions' messages: windows, drift detectors, dead letters."""
        ingested = duplicates = unadmitted = 0
        represented = 0.0
        owned, unflushed, oldest = self.owned, self._unflushed, self._oldest
        now, wall = self._clock(), self._wall()
        ingest = self.ingestor.ingest
        for delivery in batch:
            partition = delivery.partition
            if partition not in owned:
                continue
            result = ingest(delivery.value, partition, delivery.offset, wall)
            if result.duplicate:
                duplicates += 1
                continue
            if partition not in oldest:
                oldest[partition] = now
            unflushed[partition] = unflushed.get(partition, 0) + 1
            if result.rejection is not None:
                WORKER.dead_letters.inc()
                if result.record is not None:
                    WORKER.implausible.labels("future" if result.record.completion_ts > wall else "past").inc()
                self._letters.setdefault(partition, []).append((delivery, result.rejection))
            elif result.record is None:  # a request to forget (llm-d's /flush)
                WORKER.forgotten.inc(result.forgotten)
            else:
                ingested += 1
                unadmitted += not result.admitted
                represented += result.record.sample_weight
            for window in result.drifted:
                self._on_drift(window)
        if ingested:
            WORKER.ingested.inc(ingested)
            WORKER.represented.inc(represented)
        if duplicates:
            WORKER.duplicates.inc(duplicates)
        if unadmitted:
            WORKER.unadmitted.inc(unadmitted)

    async def flush(self, *, force: bool = False) -> dict[int, int]:
        """Write every partition that is due (all with ``force``); returns, per partition written, the next
        offset to read (for the reader's commit). One flush at a time: a release waits for a write in flight,
        then writes again whatever that one could not."""
        async with self._flushing:
            return await self._flush(force)

    async def _flush(self, force: bool) -> dict[int, int]:
        now = self._clock()
        due = [p for p in self._oldest if p in self.owned and (
            force or self._unflushed[p] >= self.flush_records or now - self._oldest[p] >= self.flush_interval_s)]
        windows = self.ingestor.windows
        written: dict[int, int] = {}
        for partition in due:
            oldest, unflushed = self._oldest.pop(partition), self._unflushed.pop(partition)
            entries = self._pending.pop(partition, []) + windows.flush(partition)
            letters = self._letters.pop(partition, [])
            try:
                await self._write(partition, entries, letters)
            except PublishFenced as fenced:
                log.warning("telemetry partition %d is no longer this worker's: %s", partition, fenced)
                self.owned -= {partition}
                self._generation += 1
                await self._read_owned()
                continue
            except PublishError as err:
                log.warning("window changes of telemetry partition %d not written, trying again: %s", partition, err)
                self._pending[partition] = entries
                self._letters[partition] = letters + self._letters.get(partition, [])
                self._oldest.setdefault(partition, oldest)
                self._unflushed[partition] = self._unflushed.get(partition, 0) + unflushed
                continue
            written[partition] = windows.high_water[partition] + 1
        return written
