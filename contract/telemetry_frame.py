"""Telemetry records in bulk, as a polars DataFrame: the fast path for replays and backtests.

:func:`records_frame` parses many wire records at once with polars and checks them with the same rules
as :func:`contract.telemetry.decode` (its ``FIELD_KINDS`` table), vectorised. Rows the vectorised check
rejects, and chunks polars cannot parse at all, go through the scalar validator, so every rejection
carries the validator's exact reason.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from contract.features import TARGETS
from contract.telemetry import (FIELD_KINDS, MAX_ID_CHARS, REQUIRED_FIELDS, SCHEMA_VERSION, TTFT_SLACK_MS,
                                InvalidRecord, decode, encode)

_DTYPES = {"text": pl.String, "flag": pl.Boolean, "integer": pl.Int64, "count": pl.Int64, "time": pl.Float64,
           "fraction": pl.Float64, "latency": pl.Float64,
           "versions": pl.Struct({target: pl.Int64 for target in TARGETS})}
SCHEMA = {"v": pl.Int64, **{name: _DTYPES[kind] for name, kind in FIELD_KINDS.items()}}
COLUMNS = list(FIELD_KINDS)


SMALL_CHUNK = 32  # below this many records, an unparseable chunk is checked one by one


def records_frame(values: Sequence[bytes]) -> tuple[pl.DataFrame, list[tuple[int, str]]]:
    """Valid records as a DataFrame (columns :data:`COLUMNS`, input order) and ``(index, reason)`` of the rest."""
    frame, rejected = _checked(values, 0)
    return frame.sort("_row").select(COLUMNS), sorted(rejected)


def _checked(values: Sequence[bytes], first_row: int) -> tuple[pl.DataFrame, list[tuple[int, str]]]:
    """Parse ``values`` (rows numbered from ``first_row``); a chunk polars cannot parse is halved until small."""
    try:
        frame = _parse(values)
        if frame.height != len(values):
            raise ValueError("a record spans several lines")
    except (pl.exceptions.PolarsError, ValueError):
        if len(values) <= SMALL_CHUNK:
            return _one_by_one(values, range(len(values)), first_row)
        half = len(values) // 2
        (left, left_rejected), (right, right_rejected) = (_checked(values[:half], first_row),
                                                          _checked(values[half:], first_row + half))
        return pl.concat([left, right]), left_rejected + right_rejected
    frame = frame.with_row_index("_row", offset=first_row)
    valid = _valid()
    suspect = (frame.filter(~valid).get_column("_row") - first_row).to_list()
    if not suspect:
        return frame, []
    rescued, rejected = _one_by_one(values, suspect, first_row)
    return pl.concat([frame.filter(valid), rescued]), rejected


def _parse(values: Sequence[bytes]) -> pl.DataFrame:
    if not values:
        return pl.DataFrame(schema=SCHEMA)
    return pl.read_ndjson(b"\n".join(values), schema=SCHEMA)


def _valid() -> pl.Expr:
    """The validator's rules on columns; a row failing any (or unknown to them) is re-checked one by one."""
    checks = [pl.col("v") == SCHEMA_VERSION]
    for name, kind in FIELD_KINDS.items():
        column = pl.col(name)
        if kind == "text":
            rule = column.str.len_chars().is_between(1, MAX_ID_CHARS)
        elif kind == "count":
            rule = column >= 0
        elif kind in ("time", "latency"):
            rule = column.is_finite() & (column >= 0)
        elif kind == "fraction":
            rule = column.is_finite() & column.is_between(0.0, 1.0)
        elif kind == "versions":
            rule = pl.all_horizontal([column.struct.field(t).fill_null(0) >= 0 for t in TARGETS])
        else:
            rule = pl.lit(True)
        checks.append(column.is_not_null() & rule if name in REQUIRED_FIELDS else column.is_null() | rule)
    checks += [
        pl.col("completion_ts") >= pl.col("dispatch_ts"),
        ~pl.col("stream") | pl.col("ttft_ms").is_not_null(),
        ~pl.col("stream") | (pl.col("output_tokens") <= 1) | pl.col("tpot_ms").is_not_null(),
        pl.col("ttft_ms").is_null() | (pl.col("ttft_ms") <= pl.col("e2e_ms") + TTFT_SLACK_MS),
        pl.col("slo_ttft_ms").is_null() | (pl.col("slo_ttft_ms") != 0),
        pl.col("slo_tpot_ms").is_null() | (pl.col("slo_tpot_ms") != 0),
    ]
    return pl.all_horizontal(checks).fill_null(False)


def _one_by_one(values: Sequence[bytes], rows, first_row: int) -> tuple[pl.DataFrame, list[tuple[int, str]]]:
    good, kept, rejected = [], [], []
    for row in rows:
        try:
            good.append(encode(decode(values[row])))
            kept.append(first_row + row)
        except InvalidRecord as err:
            rejected.append((first_row + row, err.reason))
    frame = _parse(good).with_columns(pl.Series("_row", kept, dtype=pl.UInt32))
    return frame.select(["_row", *SCHEMA]), rejected
