"""The windows of every (pool key, target): stratified rows in memory, mirrored to a table in batches.

The table holds one entry per (window, stratum, telemetry partition): the rows of that stratum that came
from that partition (see :func:`entry_key` / :func:`entry_value`), plus one high-water mark per
partition: the offset of the last record processed into the window. The consuming loop calls
:meth:`Windows.flush` for a partition every few thousand records (or second): it returns the entries
that changed since the last flush and then the partition's high-water mark, which travel through the
same changelog partition in order. A restart rebuilds (:meth:`Windows.restore`) a window consistent with
the mark and reads exactly the records after it; :meth:`Windows.seen` skips anything the window already
holds. Each row is encoded for the table once, when it is made (:func:`encode_row`), so rewriting a
stratum only joins bytes. A stratum's entry is stamped with the feature schema its raw columns follow
(:data:`contract.features.FEATURE_SCHEMA`); a restart restores only entries of its own schema.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Collection, Iterable
from typing import Any

import msgspec

from headroom.contract.features import FEATURE_SCHEMA
from headroom.streams.window_rules import Row, WindowLimits, admits, evictions, expired, snapshot
from headroom.trainer.samples import Samples

WindowKey = tuple[str, str]  # (pool key, target)


def row_key(partition: int, offset: int, target: str) -> str:
    """The identity of the row a record (at partition, offset) gives ``target``."""
    return f"{partition}:{offset}:{target}"


def entry_key(window: WindowKey, stratum: str, partition: int) -> str:
    """The table key of one stratum's rows from one telemetry partition."""
    return json.dumps([window[0], window[1], stratum, partition], separators=(",", ":"))


def encode_row(time: float, value: float, seq: int, offset: int, raw: tuple[float, ...]) -> bytes:
    """One row as the table stores it: the JSON array ``[time, value, seq, offset, *raw]``."""
    return _encode((time, value, seq, offset, *raw))


def entry_value(rows: Iterable[Row]) -> bytes:
    """``{"schema": FEATURE_SCHEMA, "rows": [...]}`` with the rows' :func:`encode_row` arrays, as the table
    stores it (raw bytes)."""
    return _STAMP + b",".join(row.encoded or encode_row(row.time, row.value, row.seq, row.offset, row.raw)
                              for row in rows) + b"]}"


_encode = msgspec.json.Encoder().encode
_STAMP = b'{"schema":' + _encode(FEATURE_SCHEMA) + b',"rows":['


def hwm_key(partition: int) -> str:
    return f"hwm:{partition}"


class Windows:
    def __init__(self, limits: WindowLimits):
        self.limits = limits
        self.clock = 0.0  # event time: newest completion time admitted
        self.high_water: dict[int, int] = {}  # telemetry partition -> last offset processed
        self.next_seq = 0  # admission sequence number of the next row
        self._windows: dict[WindowKey, dict[str, deque[Row]]] = {}
        self._dirty: dict[int, set[tuple[WindowKey, str]]] = {}  # partition -> strata changed since its flush
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
        strata = self._windows.get(window)
        if strata is None:
            strata = self._windows[window] = {}
        rows = strata.get(stratum)
        if rows is None:
            rows = strata[stratum] = deque()
        if row.seq >= self.next_seq:
            self.next_seq = row.seq + 1
        rows.append(row)
        dirty = self._dirty.get(row.partition)
        if dirty is None:
            dirty = self._dirty[row.partition] = set()
        dirty.add((window, stratum))
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
        limits = self.limits
        if len(rows) <= limits.max_rows and not (rows and expired(rows[0].time, self.clock, limits)):
            return []  # the common case, decided without building the eviction count
        gone = [rows.popleft() for _ in range(evictions(rows, self.clock, limits))]
        self._touch(window, stratum, gone)
        return gone

    def _touch(self, window: WindowKey, stratum: str, rows: list[Row]) -> None:
        for partition in {row.partition for row in rows}:
            self._dirty.setdefault(partition, set()).add((window, stratum))

    # --- persistence ------------------------------------------------------------------------------------

    def flush(self, partition: int) -> list[tuple[str, bytes | None]]:
        """Table entries to write for ``partition`` since its last flush (JSON bytes; None: delete the key)."""
        entries: list[tuple[str, bytes | None]] = []
        for window, stratum in self._dirty.pop(partition, ()):
            rows = [row for row in self._windows.get(window, {}).get(stratum, ()) if row.partition == partition]
            entries.append((entry_key(window, stratum, partition), entry_value(rows) if rows else None))
        if partition in self._marked:
            self._marked.discard(partition)
            entries.append((hwm_key(partition), _encode(self.high_water[partition])))
        return entries

    def restore(self, entries: Iterable[tuple[str, Any]], partitions: Collection[int] | None = None) -> int:
        """Rebuild from table entries (as written by :meth:`flush`, or that JSON decoded); returns the rows restored.

        Only entries of telemetry ``partitions`` are kept (None: all). Rows of records past their partition's
        high-water mark (a flush cut short by a crash) are dropped: those records will be read again. So are
        entries stamped with another feature schema, or with none: their rows cannot be trained on.
        """
        self._windows.clear()
        self.high_water.clear()
        self._dirty.clear()
        self._marked.clear()
        parts: list[tuple[WindowKey, str, int, Any]] = []
        for key, value in entries:
            if value is None:
                continue
            if isinstance(value, (bytes, bytearray)):  # as flushed; the changelog's reader hands back decoded JSON
                value = msgspec.json.decode(value)
            if key.startswith("hwm:"):
                partition = int(key[4:])
                if partitions is None or partition in partitions:
                    self.high_water[partition] = max(int(value), self.high_water.get(partition, -1))
                continue
            pool_key, target, stratum, partition = json.loads(key)
            if partitions is None or partition in partitions:
                parts.append(((pool_key, target), stratum, partition, value))
        loaded: list[tuple[WindowKey, str, Row]] = []
        for window, stratum, partition, value in parts:
            if not isinstance(value, dict) or value.get("schema") != FEATURE_SCHEMA:
                continue
            high_water = self.high_water.get(partition, -1)
            for time, observed, seq, offset, *raw in value["rows"]:
                if offset <= high_water:
                    time, observed, raw = float(time), float(observed), tuple(float(v) for v in raw)
                    row = Row(time, observed, raw, row_key(partition, offset, window[1]), int(seq), partition,
                              offset, encode_row(time, observed, int(seq), offset, raw))
                    loaded.append((window, stratum, row))
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
