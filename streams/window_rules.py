"""The window rules of one stratum, pure and with an explicit clock.

A stratum's rows are kept in admission order. A row is admitted unless it is already older than the
maximum age; after each admission the oldest rows are evicted while the stratum holds more than
``max_rows`` or its oldest row is older than ``max_age_s``. The clock is event time (the newest
completion time seen), so replaying history ages rows exactly as living through it did. A live consumer
first checks each record's completion time against its own wall clock (:func:`implausible`): one record
from the far future would otherwise move the clock past every real record, and none would be admitted
again.

>>> limits = WindowLimits(max_rows=2, max_age_s=10.0)
>>> rows = [Row(1.0, 5.0, (), "a"), Row(2.0, 6.0, (), "b"), Row(12.5, 7.0, (), "c")]
>>> evictions(rows, now=12.5, limits=limits)
2
>>> implausible(1_000.0 + 3600, now=1_000.0, limits=limits)
"completion_ts 4600.000 is 3600 s ahead of the consumer's clock (at most 300 s allowed)"
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from headroom.trainer.samples import Samples


@dataclass(frozen=True)
class WindowLimits:
    max_rows: int = 500  # per stratum
    max_age_s: float = 600.0  # rows older than this (event time) fade out
    max_future_s: float = 300.0  # a completion time further ahead of the consumer's clock is implausible

    def __post_init__(self) -> None:
        if self.max_rows < 1 or self.max_age_s <= 0 or self.max_future_s <= 0:
            raise ValueError(f"window limits must be positive, got max_rows={self.max_rows}, "
                             f"max_age_s={self.max_age_s}, max_future_s={self.max_future_s}")


@dataclass(frozen=True, slots=True)
class Row:
    time: float  # completion time, unix seconds
    value: float  # observed target, ms
    raw: tuple[float, ...]  # raw feature columns in contract.features.RAW_COLUMNS order
    key: str  # unique per (record, target): see streams.windows.row_key
    seq: int = 0  # admission order across the whole worker, kept through restarts
    partition: int = 0  # telemetry partition and offset of the record
    offset: int = 0
    encoded: bytes = b""  # the row as the window table stores it (streams.windows.encode_row), made once


def expired(row_time: float, now: float, limits: WindowLimits) -> bool:
    return row_time < now - limits.max_age_s


def implausible(completion_ts: float, now: float, limits: WindowLimits) -> str | None:
    """Why a record completed at ``completion_ts`` cannot be true at wall-clock time ``now`` (None: it can):
    further ahead than ``max_future_s``, or older than any window keeps a row."""
    if completion_ts > now + limits.max_future_s:
        return (f"completion_ts {completion_ts:.3f} is {completion_ts - now:.0f} s ahead of the consumer's clock "
                f"(at most {limits.max_future_s:g} s allowed)")
    if completion_ts < now - limits.max_age_s:
        return (f"completion_ts {completion_ts:.3f} is {now - completion_ts:.0f} s behind the consumer's clock, "
                f"older than the windows' {limits.max_age_s:g} s")
    return None


def admits(row_time: float, now: float, limits: WindowLimits) -> bool:
    """Whether a row completed at ``row_time`` may enter a window whose clock reads ``now``."""
    return not expired(row_time, now, limits)


def evictions(rows: Sequence[Row], now: float, limits: WindowLimits) -> int:
    """How many of the oldest-admitted ``rows`` to evict: over the row cap, or aged out at the front."""
    count = max(len(rows) - limits.max_rows, 0)
    while count < len(rows) and expired(rows[count].time, now, limits):
        count += 1
    return count


def live(rows: Iterable[Row], now: float, limits: WindowLimits) -> list[Row]:
    """The rows not aged out at ``now`` (a snapshot never trains on expired rows)."""
    return [row for row in rows if not expired(row.time, now, limits)]


def snapshot(strata: Mapping[str, Sequence[Row]], now: float, limits: WindowLimits) -> Samples:
    """The training samples of a window: every live row of every stratum."""
    rows: list[tuple[float, float, tuple[float, ...]]] = []
    labels: list[str] = []
    for stratum, stratum_rows in strata.items():
        for row in live(stratum_rows, now, limits):
            rows.append((row.time, row.value, row.raw))
            labels.append(stratum)
    return Samples.from_rows(rows, labels)
