"""Telemetry records in bulk, as a polars DataFrame: the fast path for replays and backtests.

:func:`records_frame` decodes many wire records at once with msgspec against
:data:`contract.telemetry.WIRE_TYPE` (types and value ranges), then checks the cross-field rules of the
validator vectorised in polars. Any record that fails either step goes through the scalar validator, so
every rejection carries its exact reason and the bulk path accepts exactly what the validator accepts.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import polars as pl

from contract.features import TARGETS
from contract.telemetry import (FIELD_KINDS, MAX_RECORD_BYTES, SCHEMA_VERSION, TTFT_SLACK_MS, WIRE_TYPE,
                                InvalidRecord, decode)

_DTYPES = {"text": pl.String, "flag": pl.Boolean, "integer": pl.Int64, "count": pl.Int64, "time": pl.Float64,
           "fraction": pl.Float64, "latency": pl.Float64,
           "versions": pl.Struct({target: pl.Int64 for target in TARGETS})}
SCHEMA = {name: _DTYPES[kind] for name, kind in FIELD_KINDS.items()}
COLUMNS = list(SCHEMA)
SMALL_CHUNK = 32  # below this many records, a chunk that fails to decode is decoded one by one

_ONE = msgspec.json.Decoder(WIRE_TYPE)
_MANY = msgspec.json.Decoder(list[WIRE_TYPE])


def records_frame(values: Sequence[bytes]) -> tuple[pl.DataFrame, list[tuple[int, str]]]:
    """Valid records as a DataFrame (columns :data:`COLUMNS`, input order) and ``(index, reason)`` of the rest."""
    rows, wires, suspect = [], [], []
    _decode(values, 0, rows, wires, suspect)
    frame = _frame(wires, rows)
    valid = _valid()
    suspect += frame.filter(~valid).get_column("_row").to_list()
    if not suspect:
        return frame.select(COLUMNS), []
    rescued, rejected = [], []
    for row in sorted(suspect):
        try:
            rescued.append((row, decode(values[row])))
        except InvalidRecord as err:
            rejected.append((row, err.reason))
    extra = _frame([record for _, record in rescued], [row for row, _ in rescued])
    return pl.concat([frame.filter(valid), extra]).sort("_row").select(COLUMNS), rejected


def _decode(values: Sequence[bytes], first: int, rows: list, wires: list, suspect: list) -> None:
    """Typed decoding of a chunk; a chunk that fails is halved until small, then decoded one by one."""
    try:
        decoded = _MANY.decode(b"[" + b",".join(values) + b"]")
        if len(decoded) != len(values):
            raise msgspec.DecodeError("a value holds more than one record")
    except (msgspec.DecodeError, msgspec.ValidationError):
        if len(values) > SMALL_CHUNK:
            half = len(values) // 2
            _decode(values[:half], first, rows, wires, suspect)
            _decode(values[half:], first + half, rows, wires, suspect)
            return
        decoded = []
        for offset, value in enumerate(values):
            try:
                decoded.append(_ONE.decode(value))
            except (msgspec.DecodeError, msgspec.ValidationError):
                decoded.append(None)
    for offset, (value, wire) in enumerate(zip(values, decoded)):
        if wire is None or wire.v != SCHEMA_VERSION or len(value) > MAX_RECORD_BYTES:
            suspect.append(first + offset)
        else:
            rows.append(first + offset)
            wires.append(wire)


def _frame(records: list, rows: list[int]) -> pl.DataFrame:
    columns = {"_row": pl.Series(rows, dtype=pl.UInt32)}
    for name, dtype in SCHEMA.items():
        columns[name] = pl.Series([getattr(r, name) for r in records], dtype=dtype)
    return pl.DataFrame(columns)


def _valid() -> pl.Expr:
    """The validator's cross-field rules on columns (types and ranges were msgspec's); failures are re-checked."""
    checks = [
        pl.col("completion_ts") >= pl.col("dispatch_ts"),
        ~pl.col("stream") | pl.col("ttft_ms").is_not_null(),
        ~pl.col("stream") | (pl.col("output_tokens") <= 1) | pl.col("tpot_ms").is_not_null(),
        pl.col("ttft_ms").is_null() | (pl.col("ttft_ms") <= pl.col("e2e_ms") + TTFT_SLACK_MS),
        pl.col("slo_ttft_ms").is_null() | (pl.col("slo_ttft_ms") != 0),
        pl.col("slo_tpot_ms").is_null() | (pl.col("slo_tpot_ms") != 0),
    ]
    return pl.all_horizontal(checks).fill_null(False)

