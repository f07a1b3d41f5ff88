"""The windows of every (pool key, target): stratified rows in memory, mirrored to a table in batches.

The table holds one entry per (window, stratum, telemetry partition): the rows of that stratum that came
from that partition (see :func:`stratum_key` / :func:`stratum_value`), plus one high-water mark per
partition: the offset of the last record processed into the window. The ingest agent calls
:meth:`Windows.flush` for a partition every few hundred records (or fraction of a second): it returns
the entries that changed since the last flush and the partition's high-water mark, which travel through
the same changelog partition in order. Only then are that partition's records acknowledged, so a restart
rebuilds (:meth:`Windows.restore`) a window consistent with the mark, replays exactly the records after
it, and :meth:`Windows.seen` skips anything the window already holds.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from typing import Any

import msgspec

from streams.window import Row, WindowLimits, admits, evictions, snapshot
from trainer.samples import Samples

WindowKey = tuple[str, str]  # (pool key, target)
_Part = tuple[WindowKey, str, int]  # (window, stratum, telemetry partition)


def row_key(partition: int, offset: int, target: str) -> str:
    """The identity of the row a record (at partition, offset) gives ``target``."""
    return f"{partition}:{offset}:{target}"


def stratum_key(window: WindowKey, stratum: str, partition: int) -> str:
    """The table key of one stratum's rows from one telemetry partition."""
    return json.dumps([window[0], window[1], stratum, partition], separators=(",", ":"))


def stratum_value(rows: Iterable[Row]) -> bytes:
    """The JSON array ``[time, value, seq, offset, *raw]`` per row, as the table stores it (raw bytes)."""
    return _encode([(row.time, row.value, row.seq, row.offset, *row.raw) for row in rows])


_encode = msgspec.json.Encoder().encode


def hwm_key(partition: int) -> str:
    return f"hwm:{partition}"


class Windows:
    def __init__(self, limits: WindowLimits):
        self.limits = limits
        self.clock = 0.0  # event time: newest completion time admitted
        self.high_water: dict[int, int] = {}  # telemetry partition -> last offset processed
        self.next_seq = 0  # admission sequence number of the next row
        self._windows: dict[WindowKey, dict[str, deque[Row]]] = {}
        self._dirty: set[_Part] = set()
        self._marked: set[int] = set()  # partitions whose high-water mark moved since their last flush

    # --- admission --------------------------------------------------------------------------------------

    def seen(self, partition: int, offset: int) -> bool:
        """Whether the record at (partition, offset) was already processed into the window."""
        return offset <= self.high_water.get(partition, -1)

    def mark(self, partition: int, offset: int) -> None:
        """Record (partition, offset) as processed."""
        self.high_water[partition] = offset
        self._marked.add(partition)

    def advance(self, time: float) -> None:
        self.clock = max(self.clock, time)

    def add(self, window: WindowKey, stratum: str, row: Row) -> tuple[bool, list[Row]]:
        """Admit ``row`` unless too old; returns (admitted, rows evicted from its stratum)."""
        if not admits(row.time, self.clock, self.limits):
            return False, []
        rows = self._windows.setdefault(window, {}).setdefault(stratum, deque())
        self.next_seq = max(self.next_seq, row.seq + 1)
        rows.append(row)
        self._dirty.add((window, stratum, row.partition))
        return True, self._evict(window, stratum, rows)

    def sweep(self) -> list[Row]:
        """Evict aged-out rows from every stratum (strata nobody writes to must fade too)."""
        evicted: list[Row] = []
        for window, strata in self._windows.items():
            for stratum, rows in strata.items():
                evicted.extend(self._evict(window, stratum, rows))
        return evicted

    def forget_before(self, window: WindowKey, time: float) -> list[Row]:
        """Evict every row of ``window`` completed before ``time`` (the regime they describe has ended)."""
        evicted: list[Row] = []
        strata = self._windows.get(window, {})
        for stratum, rows in strata.items():
            gone = [row for row in rows if row.time < time]
            if gone:
                strata[stratum] = deque(row for row in rows if row.time >= time)
                self._touch(window, stratum, gone)
                evicted.extend(gone)
        return evicted

    def _evict(self, window: WindowKey, stratum: str, rows: deque[Row]) -> list[Row]:
        gone = [rows.popleft() for _ in range(evictions(rows, self.clock, self.limits))]
        self._touch(window, stratum, gone)
        return gone

    def _touch(self, window: WindowKey, stratum: str, rows: list[Row]) -> None:
        for partition in {row.partition for row in rows}:
            self._dirty.add((window, stratum, partition))

    # --- persistence ------------------------------------------------------------------------------------

    def flush(self, partition: int) -> list[tuple[str, bytes | None]]:
        """Table entries to write for ``partition`` since its last flush (JSON bytes; None: delete the key)."""
        entries: list[tuple[str, bytes | None]] = []
        for part in [p for p in self._dirty if p[2] == partition]:
            self._dirty.discard(part)
            window, stratum, _ = part
            rows = [row for row in self._windows.get(window, {}).get(stratum, ()) if row.partition == partition]
            entries.append((stratum_key(window, stratum, partition), stratum_value(rows) if rows else None))
        if partition in self._marked:
            self._marked.discard(partition)
            entries.append((hwm_key(partition), _encode(self.high_water[partition])))
        return entries

    def restore(self, entries: Iterable[tuple[str, Any]]) -> int:
        """Rebuild from table entries (as written by :meth:`flush`, or that JSON decoded); returns the rows restored."""
        self._windows.clear()
        self.high_water.clear()
        self._dirty.clear()
        self._marked.clear()
        loaded: list[tuple[WindowKey, str, Row]] = []
        for key, value in entries:
            if value is None:
                continue
            if isinstance(value, (bytes, bytearray)):  # as flushed; the changelog's reader hands back decoded JSON
                value = msgspec.json.decode(value)
            if key.startswith("hwm:"):
                partition = int(key[4:])
                self.high_water[partition] = max(int(value), self.high_water.get(partition, -1))
                continue
            pool_key, target, stratum, partition = json.loads(key)
            for time, observed, seq, offset, *raw in value:
                row = Row(float(time), float(observed), tuple(float(v) for v in raw),
                          row_key(partition, offset, target), int(seq), partition, offset)
                loaded.append(((pool_key, target), stratum, row))
        loaded.sort(key=lambda item: item[2].seq)
        for window, stratum, row in loaded:
            self._windows.setdefault(window, {}).setdefault(stratum, deque()).append(row)
            self.clock = max(self.clock, row.time)
            self.next_seq = max(self.next_seq, row.seq + 1)
        return len(loaded)

    # --- reading ----------------------------------------------------------------------------------------

    def keys(self) -> list[WindowKey]:
        return list(self._windows)

    def size(self, window: WindowKey) -> int:
        return sum(len(rows) for rows in self._windows.get(window, {}).values())

    def strata_counts(self, window: WindowKey) -> dict[str, int]:
        return {s: len(rows) for s, rows in self._windows.get(window, {}).items() if rows}

    def copy(self, window: WindowKey) -> dict[str, list[Row]]:
        """A shallow copy of a window's rows, cheap enough to take on the event loop."""
        return {s: list(rows) for s, rows in self._windows.get(window, {}).items() if rows}

    def samples(self, window: WindowKey) -> Samples:
        return snapshot(self.copy(window), self.clock, self.limits)
