"""Telemetry records in bulk, as a polars DataFrame: the fast path for replays and backtests.

:func:`records_frame` takes two paths to one result:

- **columnar** — plain values (bytes within the size limit, without a backslash or a line break) are
  parsed column by column by polars' NDJSON reader, outside the GIL and with no Python object per
  record, then checked on columns: the field set (below), the value ranges and the cross-field rules of
  the validator.
- **general** — every other value, and every record that fails a columnar check, is decoded with msgspec
  against :data:`contract.telemetry.WIRE_TYPE`, and whatever that refuses goes through the scalar
  validator, so each rejection carries its exact reason.

The field-set check. The reader takes the first of repeated keys (the validator the last), ignores
unknown keys and turns any JSON value into text for a text column (the validator refuses both). In
a plain value every ``"`` delimits a string, so a record holds ``2 × (keys + string values)`` of them. A
record stays columnar only if that count is what its parsed fields make it (each present field and
model-version entry a key, the three texts strings) and, where a text could have been made from a
number, boolean, object or array, its record holds it as ``"name":"value"``. A text made from a
non-string lowers the count by 2, and its ``"name":"value"`` can then only be an extra key with a string
value, which raises it by 4; every other difference — an extra, repeated or null key — only raises it.
So the count is right only when the parsed fields are the record, and both paths accept exactly what
the validator accepts, with the same values (but for a text holding a lone surrogate: see
:func:`_storable`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeGuard

import msgspec
import polars as pl

from headroom.contract.server_state import KIND_RANGES
from headroom.contract.targets import TARGETS
from headroom.contract.telemetry import (
    FIELD_DEFAULTS,
    FIELD_KINDS,
    MAX_ID_CHARS,
    MAX_INTEGER,
    MAX_RECORD_BYTES,
    MAX_SAMPLE_WEIGHT,
    REQUIRED_FIELDS,
    SCHEMA_VERSION,
    TTFT_SLACK_MS,
    WIRE_TYPE,
    InvalidRecord,
    TelemetryRecord,
    decode,
)

if TYPE_CHECKING:
    from polars._typing import PolarsDataType

_DTYPES: dict[str, PolarsDataType] = {"text": pl.String, "flag": pl.Boolean, "integer": pl.Int64, "count": pl.Int64, "time": pl.Float64,
                                       "fraction": pl.Float64, "latency": pl.Float64, "weight": pl.Float64,
                                       "versions": pl.Struct({target: pl.Int64 for target in TARGETS})}
SCHEMA = {name: _DTYPES[kind] for name, kind in FIELD_KINDS.items()}
COLUMNS = list(SCHEMA)
SMALL_CHUNK = 32  # below this many records, a chunk that fails to decode is decoded one by one
SMALL_PARSE = 64  # below this many records, a chunk the NDJSON reader refuses takes the general path

_WIRE_SCHEMA = {"v": pl.Int64, **SCHEMA}
_TEXT_FIELDS = [name for name, kind in FIELD_KINDS.items() if kind == "text"]
_NON_STRING_TEXT = r"^(?:[-0-9\[{]|true$|false$)"  # how the reader writes a number, boolean, object or array

_ONE = msgspec.json.Decoder(WIRE_TYPE)
_MANY = msgspec.json.Decoder(list[WIRE_TYPE])  # type: ignore[valid-type]  # WIRE_TYPE is made at run time


def _expected_quotes() -> pl.Expr:
    """The ``"`` a record holds when its keys are exactly its parsed fields and its three texts are strings."""
    keys = pl.sum_horizontal([pl.col(name).is_not_null() for name in _WIRE_SCHEMA]
                             + [pl.col("model_versions").struct.field(t).is_not_null() for t in TARGETS])
    return 2 * (keys + len(_TEXT_FIELDS))


def _in_range() -> pl.Expr:
    """The validator's per-field rules on columns: version, required fields present, values within range."""
    def allowed(name: str) -> pl.Expr:
        kind, column = FIELD_KINDS[name], pl.col(name)
        if kind == "text":
            return column.str.len_chars().is_between(1, MAX_ID_CHARS)
        if kind in KIND_RANGES:
            return column.is_between(*KIND_RANGES[kind])  # NaN is above every bound; infinities beyond them
        if kind == "integer":
            return column.is_between(-MAX_INTEGER, MAX_INTEGER)
        if kind == "time":
            return column.is_finite() & (column >= 0)
        if kind == "weight":
            return column.is_between(1.0, MAX_SAMPLE_WEIGHT)
        if kind == "versions":
            return pl.all_horizontal(column.struct.field(t).is_between(0, MAX_INTEGER).fill_null(True)
                                     for t in TARGETS)
        return pl.lit(True)

    checks = [(pl.col("v") == SCHEMA_VERSION).fill_null(False)]
    checks += [pl.col(name).is_not_null() for name in REQUIRED_FIELDS]
    checks += [allowed(name).fill_null(True) for name in FIELD_KINDS]
    return pl.all_horizontal(checks)


def _consistent() -> pl.Expr:
    """The validator's cross-field rules on columns; failures are re-checked by the scalar validator."""
    checks = [
        pl.col("completion_ts") >= pl.col("dispatch_ts"),
        ~pl.col("stream") | pl.col("ttft_ms").is_not_null() | pl.col("tpot_ms").is_not_null(),
        ~pl.col("stream") | (pl.col("output_tokens") <= 1) | pl.col("tpot_ms").is_not_null(),
        pl.col("ttft_ms").is_null() | (pl.col("ttft_ms") <= pl.col("e2e_ms") + TTFT_SLACK_MS),
        pl.col("slo_ttft_ms").is_null() | (pl.col("slo_ttft_ms") != 0),
        pl.col("slo_tpot_ms").is_null() | (pl.col("slo_tpot_ms") != 0),
        pl.col("encoder_matched_size").fill_null(0) <= pl.col("encoder_input_size").fill_null(0),
    ]
    return pl.all_horizontal(checks).fill_null(False)


def _defaults() -> list[pl.Expr]:
    return [pl.col(name).fill_null(default) for name, default in FIELD_DEFAULTS.items() if default is not None]


_VALID = (_in_range() & _consistent()).fill_null(False)
_CONSISTENT = _consistent()
_EXPECTED_QUOTES = _expected_quotes()
_DEFAULTS = _defaults()


def records_frame(values: Sequence[bytes | None]) -> tuple[pl.DataFrame, list[tuple[int, str]]]:
    """Valid records as a DataFrame (columns :data:`COLUMNS`, input order) and ``(index, reason)`` of the rest
    (None, a record without a value, among them)."""
    frames: list[pl.DataFrame] = []
    others: list[int] = []
    _columnar(values, list(range(len(values))), frames, others)
    parsed = pl.concat(frames) if frames else pl.DataFrame(schema={"_row": pl.UInt32, **SCHEMA})
    if not others:
        return parsed.select(COLUMNS), []
    general, rejected = _general(values, sorted(others))
    return pl.concat([parsed, general]).sort("_row").select(COLUMNS), rejected


def _columnar(values: Sequence[bytes | None], rows: list[int], frames: list[pl.DataFrame], others: list[int]) -> None:
    """Parse the values at ``rows`` column by column; the rows it cannot vouch for are added to ``others``."""
    if not rows:
        return
    chunk = values if len(rows) == len(values) else [values[row] for row in rows]
    if not _all_bytes(chunk) or (lines := _plain_lines(chunk)) is None:
        # one by one: the plain values are parsed, the rest take the general path
        plain = [_is_plain(value) for value in chunk]
        others += [row for row, ok in zip(rows, plain) if not ok]
        _columnar(values, [row for row, ok in zip(rows, plain) if ok], frames, others)
        return
    try:
        frame = pl.read_ndjson(lines, schema=_WIRE_SCHEMA)
        if frame.height != len(rows):
            raise pl.exceptions.ComputeError("a value is blank")
    except pl.exceptions.PolarsError:  # halved until small, then left to the general path
        if len(rows) < SMALL_PARSE:
            others += rows
            return
        half = len(rows) // 2
        _columnar(values, rows[:half], frames, others)
        _columnar(values, rows[half:], frames, others)
        return
    frame = frame.with_columns(pl.Series("_row", rows, dtype=pl.UInt32))
    checks = frame.select(_VALID.alias("valid"), _EXPECTED_QUOTES.alias("quotes"))
    kept = checks.get_column("valid") & _texts_are_strings(frame, chunk)
    # Each kept row holds at least the quotes it should (see the module docstring), so equal sums mean
    # every kept row holds exactly its own; otherwise the rows are counted one by one.
    expected = checks.get_column("quotes")
    dropped = sum(value.count(b'"') for value in itertools.compress(chunk, (~kept).to_list()))
    if lines.count(b'"') - dropped != expected.filter(kept).sum():
        kept &= pl.Series([value.count(b'"') for value in chunk]) == expected
    others += frame.filter(~kept).get_column("_row").to_list()
    frames.append(frame.filter(kept).select(["_row", *COLUMNS]).with_columns(_DEFAULTS))


def _plain_lines(chunk: Sequence[bytes]) -> bytes | None:
    """The values as NDJSON lines, or None when one is not plain."""
    lines = b"\n".join(chunk)
    if (lines.count(b"\n") != len(chunk) - 1 or b"\\" in lines or b"\r" in lines
            or max(map(len, chunk)) > MAX_RECORD_BYTES or min(map(len, chunk)) < 2):
        return None
    return lines


def _all_bytes(values: Sequence[bytes | None]) -> TypeGuard[Sequence[bytes]]:
    return set(map(type, values)) == {bytes}  # exactly bytes: a subclass may not join or count as bytes do


def _is_plain(value: object) -> bool:
    return (type(value) is bytes and 2 <= len(value) <= MAX_RECORD_BYTES
            and b"\n" not in value and b"\r" not in value and b"\\" not in value)


def _texts_are_strings(frame: pl.DataFrame, chunk: Sequence[bytes]) -> pl.Series:
    """Whether each row's text fields were JSON strings: a text that a number, boolean, object or array
    could have made must also appear in its record as ``"name":"value"``."""
    doubtful = frame.select(pl.any_horizontal(pl.col(_TEXT_FIELDS).str.contains(_NON_STRING_TEXT))
                            .fill_null(False)).to_series()
    if not doubtful.any():
        return ~doubtful
    rows = doubtful.arg_true()
    raw = pl.Series([chunk[row] for row in rows.to_list()], dtype=pl.Binary).cast(pl.String)
    spelled = frame[rows].with_columns(raw.alias("_raw")).select(pl.all_horizontal(
        pl.col("_raw").str.contains(pl.concat_str([pl.lit(f'"{name}":"'), pl.col(name), pl.lit('"')]), literal=True)
        for name in _TEXT_FIELDS).fill_null(False)).to_series()
    return (~doubtful).scatter(rows, spelled)


def _general(values: Sequence[bytes | None], rows: list[int]) -> tuple[pl.DataFrame, list[tuple[int, str]]]:
    """The values at ``rows`` (ascending) through msgspec and, where it refuses, the scalar validator."""
    chunk = [values[row] for row in rows]
    kept: list[int] = []
    wires: list[Any] = []
    suspect: list[int] = []
    if _all_bytes(chunk):
        _decode(chunk, 0, kept, wires, suspect)
    else:
        suspect = list(range(len(chunk)))
    frame = _frame(wires, [rows[i] for i in kept])
    valid = _CONSISTENT
    suspect = sorted([rows[i] for i in suspect] + frame.filter(~valid).get_column("_row").to_list())
    rescued, rejected = [], []
    for row in suspect:
        try:
            rescued.append((row, _storable(decode(values[row]))))
        except InvalidRecord as err:
            rejected.append((row, err.reason))
    extra = _frame([record for _, record in rescued], [row for row, _ in rescued])
    return pl.concat([frame.filter(valid), extra]), rejected


def _decode(values: Sequence[bytes], first: int, rows: list[int], wires: list[Any], suspect: list[int]) -> None:
    """Typed decoding of a chunk; a chunk that fails is halved until small, then decoded one by one."""
    try:
        decoded: list[Any] = _MANY.decode(b"[" + b",".join(values) + b"]")
        if len(decoded) != len(values):
            raise msgspec.DecodeError("a value holds more than one record")
    except (msgspec.DecodeError, msgspec.ValidationError):
        if len(values) > SMALL_CHUNK:
            half = len(values) // 2
            _decode(values[:half], first, rows, wires, suspect)
            _decode(values[half:], first + half, rows, wires, suspect)
            return
        decoded = []
        for value in values:
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


def _frame(records: Sequence[Any], rows: list[int]) -> pl.DataFrame:
    columns = {"_row": pl.Series(rows, dtype=pl.UInt32)}
    for name, dtype in SCHEMA.items():
        columns[name] = pl.Series([getattr(r, name) for r in records], dtype=dtype)
    return pl.DataFrame(columns)


def _storable(record: TelemetryRecord) -> TelemetryRecord:
    """The record, unless a text of it holds a lone surrogate (JSON escapes can spell one; the validator
    lets it through) which no text column can hold: the one kind of record only this reader refuses."""
    for name in _TEXT_FIELDS:
        try:
            getattr(record, name).encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRecord(f"field {name!r} holds a lone surrogate, which is not text") from None
    return record
