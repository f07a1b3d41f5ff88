"""The JSON bodies of llm-d's latency predictor APIs: their rows, checked the way its FastAPI servers check
them, with FastAPI's 422 body for what fails, and the responses' JSON (:func:`json_response`, :func:`iso_time`).

A row is a JSON object of named fields (:data:`PREDICTION_FIELDS`, :data:`TRAINING_FIELDS`): counts are
integers (a number with no fractional part counts as one), fractions and latencies numbers, each within the
range of its kind that telemetry and every other API hold it to (:data:`contract.server_state.KIND_RANGES`:
a count up to a billion, a latency up to an hour), ``pod_type`` any string or null, as the reference takes it
(:func:`headroom.llmd_terms.role_of` reads the role), ``timestamp`` an RFC 3339 time or unix seconds. Unknown fields
are ignored, as FastAPI does. Unlike the
reference's lax mode, numbers written as strings and booleans are refused: a row says what it means or gets a 422
naming the field.

Two paths reach one answer: msgspec decodes whole bodies against types made from the field table (the fast
path); a body it refuses is checked field by field (:func:`check_row`), which collects every problem as an
error ``{"type", "loc", "msg", "input"[, "ctx"]}`` the way FastAPI words them, or yields the row when
msgspec was stricter than the table (an integral float for a count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
from aiohttp import web

from headroom.contract.features import RAW_FIELDS
from headroom.contract.server_state import KIND_RANGES
from headroom.llmd_terms import RAW_COLUMN_OF

MAX_ROWS = 10_000  # rows per bulk call, as the reference allows
MISSING = msgspec.UNSET
_ENCODE = msgspec.json.Encoder().encode


@dataclass(frozen=True)
class Field:
    kind: str  # "count", "fraction", "latency", "pod_type" or "time"
    default: Any = MISSING


def _raw(name: str, default: Any = MISSING) -> Field:
    """A field that is one of headroom's raw features (:data:`headroom.llmd_terms.RAW_COLUMN_OF`), of its kind."""
    return Field(RAW_FIELDS[RAW_COLUMN_OF[name]].kind, default)


_SERVER_STATE = {name: _raw(name) for name in ("kv_cache_percentage", "input_token_length", "num_request_waiting",
                                               "num_request_running")}
_OPTIONAL = {"pod_type": Field("pod_type", ""),
             **{name: _raw(name, 0) for name in ("prefill_tokens_in_flight", "decode_tokens_in_flight",
                                                 "encoder_input_size", "encoder_matched_size")}}
_SAMPLE = {"num_tokens_generated": Field("count"), "prefix_cache_score": _raw("prefix_cache_score")}
PREDICTION_FIELDS = {**_SERVER_STATE, **_SAMPLE, **_OPTIONAL}
TRAINING_FIELDS = {**_SERVER_STATE, "actual_ttft_ms": Field("latency"), "actual_tpot_ms": Field("latency"), **_SAMPLE,
                   **_OPTIONAL, "timestamp": Field("time", None)}

_TYPES = {"count": Annotated[int, msgspec.Meta(ge=0, le=KIND_RANGES["count"][1])],
          **{kind: Annotated[float, msgspec.Meta(ge=low, le=high)] for kind, (low, high) in KIND_RANGES.items()
             if kind != "count"},
          "pod_type": str | None,
          "time": datetime | float | None}


def _struct(name: str, fields: dict[str, Field]) -> type:
    return msgspec.defstruct(name, [(n, _TYPES[f.kind]) if f.default is MISSING else (n, _TYPES[f.kind], f.default)
                                    for n, f in fields.items()], kw_only=True)


PredictionRow = _struct("PredictionRequest", PREDICTION_FIELDS)
TrainingRow = _struct("TrainingEntry", TRAINING_FIELDS)
MODEL_NAMES = {PredictionRow: "PredictionRequest", TrainingRow: "TrainingEntry"}
FIELDS_OF = {PredictionRow: PREDICTION_FIELDS, TrainingRow: TRAINING_FIELDS}


class Unprocessable(Exception):
    """A body that fails validation; ``errors`` are FastAPI's 422 ``detail`` entries."""

    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(errors[0]["msg"] if errors else "invalid body")
        self.errors = errors

    @property
    def body(self) -> dict[str, Any]:
        return {"detail": self.errors}


def decode_rows(body: bytes, key: str, row_type: type) -> list[Any]:
    """The rows of a bulk body ``{key: [row, ...]}`` (1 to :data:`MAX_ROWS`), all or none; raises
    :class:`Unprocessable` listing every problem."""
    try:
        return list(getattr(_bulk_decoder(key, row_type).decode(body), key))
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    items = bulk_items(body, key)
    rows, errors = [], []
    for index, item in enumerate(items):
        row, problems = check_row(item, row_type, ("body", key, index))
        rows.append(row)
        errors += problems
    if errors:
        raise Unprocessable(errors)
    return rows


def decode_row(body: bytes, row_type: type) -> Any:
    """One row as a whole body; raises :class:`Unprocessable`."""
    try:
        return _row_decoder(row_type).decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    row, errors = check_row(_json(body), row_type, ("body",))
    if errors:
        raise Unprocessable(errors)
    return row


def bulk_items(body: bytes, key: str) -> list[Any]:
    """The items of a bulk body's list, unchecked; raises :class:`Unprocessable` for a body that is not
    ``{key: [...]}`` with 1 to :data:`MAX_ROWS` items."""
    doc = _json(body)
    if not isinstance(doc, dict):
        raise Unprocessable([_error("model_attributes_type", ("body",), "Input should be a valid dictionary or "
                                    "object to extract fields from", doc)])
    if key not in doc:
        raise Unprocessable([_error("missing", ("body", key), "Field required", doc)])
    items = doc[key]
    if not isinstance(items, list):
        raise Unprocessable([_error("list_type", ("body", key), "Input should be a valid list", items)])
    if not 1 <= len(items) <= MAX_ROWS:
        bound, word = (1, "least") if not items else (MAX_ROWS, "most")
        kind = "too_short" if not items else "too_long"
        raise Unprocessable([_error(kind, ("body", key), f"List should have at {word} {bound} item"
                                    f"{'s' if bound > 1 else ''} after validation, not {len(items)}",
                                    items if len(items) <= 10 else f"[{len(items)} items]",
                                    {"field_type": "List", f"{'min' if not items else 'max'}_length": bound,
                                     "actual_length": len(items)})])
    return items


def check_row(item: Any, row_type: type, loc: tuple[Any, ...]) -> tuple[Any, list[dict[str, Any]]]:
    """Check one row field by field: ``(row, [])``, or ``(None, errors)`` with every problem."""
    if not isinstance(item, dict):
        return None, [_error("model_type", loc, f"Input should be a valid dictionary or instance of "
                                               f"{MODEL_NAMES[row_type]}", item)]
    values, errors = {}, []
    for name, field in FIELDS_OF[row_type].items():
        if name not in item:
            if field.default is MISSING:
                errors.append(_error("missing", (*loc, name), "Field required", item))
            continue
        value, problem = _CHECKS[field.kind](item[name])
        if problem is None:
            values[name] = value
        else:
            kind, msg, *ctx = problem
            errors.append(_error(kind, (*loc, name), msg, item[name], *ctx))
    if errors:
        return None, errors
    try:
        return msgspec.convert(values, row_type), []
    except msgspec.ValidationError as err:  # not expected: the table and the types say the same
        return None, [_error("value_error", loc, f"Value error, {err}", item)]


def row_dict(row: Any) -> dict[str, Any]:
    """A decoded row as a plain mapping of its fields."""
    return {name: getattr(row, name) for name in row.__struct_fields__}


def timestamp_of(value: datetime | float | None) -> float | None:
    """Unix seconds of a row's ``timestamp`` (numbers above 2·10^10 are milliseconds, as FastAPI reads them;
    a time without a zone is UTC)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return value / 1000.0 if value > 2e10 else float(value)


def iso_time(unix_seconds: float) -> str:
    """A time as the reference's responses write one (RFC 3339, UTC)."""
    return datetime.fromtimestamp(unix_seconds, tz=UTC).isoformat()


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=_ENCODE(body), status=status, content_type="application/json")


def _number(value: Any) -> bool:
    return type(value) is int or (type(value) is float and math.isfinite(value))


# a field check's answer: the value, or None and the problem (kind, message and, for a range, its bound)
Checked = tuple[Any, tuple[str, str] | tuple[str, str, dict[str, float]] | None]


def _count(value: Any) -> Checked:
    if type(value) is float and math.isfinite(value) and value.is_integer():
        value = int(value)
    elif type(value) is float:
        return None, ("int_from_float", "Input should be a valid integer, got a number with a fractional part")
    if type(value) is not int:
        return None, ("int_type", "Input should be a valid integer")
    return _within(value, "count")


def _number_of(kind: str) -> Any:
    def check(value: Any) -> Checked:
        if not _number(value):
            return None, ("float_type", "Input should be a valid number")
        checked, error = _within(value, kind)  # an integer past any float is compared as it is
        return (None if error else float(checked)), error
    return check


def _within(value: float, kind: str) -> Checked:
    """``value`` if it is within the range of its kind (:data:`contract.server_state.KIND_RANGES`), else the
    error FastAPI gives for a bound it crossed."""
    low, high = KIND_RANGES[kind]
    if value < low:
        return None, ("greater_than_equal", f"Input should be greater than or equal to {low:.10g}", {"ge": low})
    if value > high:
        return None, ("less_than_equal", f"Input should be less than or equal to {high:.10g}", {"le": high})
    return value, None


def _pod_type(value: Any) -> Checked:
    if value is None or type(value) is str:
        return value, None
    return None, ("string_type", "Input should be a valid string")


def _time(value: Any) -> Checked:
    try:
        return msgspec.convert(value, _TYPES["time"]), None
    except msgspec.ValidationError:
        return None, ("datetime_type", "Input should be a valid datetime (RFC 3339) or unix seconds")


_CHECKS = {"count": _count, "fraction": _number_of("fraction"), "latency": _number_of("latency"),
           "pod_type": _pod_type, "time": _time}


def _error(kind: str, loc: tuple[Any, ...], msg: str, value: Any, ctx: dict[str, Any] | None = None) -> dict[str, Any]:
    error = {"type": kind, "loc": list(loc), "msg": msg, "input": value}
    if ctx is not None:
        error["ctx"] = ctx
    return error


def _json(body: bytes) -> Any:
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError as err:
        raise Unprocessable([_error("json_invalid", ("body", 0), "JSON decode error", {},
                                    {"error": str(err)})]) from None


_DECODERS: dict[tuple[str, type], msgspec.json.Decoder[Any]] = {}


def _bulk_decoder(key: str, row_type: type) -> msgspec.json.Decoder[Any]:
    decoder = _DECODERS.get((key, row_type))
    if decoder is None:
        bulk = msgspec.defstruct(f"Bulk{MODEL_NAMES[row_type]}", [
            (key, Annotated[list[row_type],  # type: ignore[valid-type]
                            msgspec.Meta(min_length=1, max_length=MAX_ROWS)])])
        decoder = _DECODERS[key, row_type] = msgspec.json.Decoder(bulk)
    return decoder


def _row_decoder(row_type: type) -> msgspec.json.Decoder[Any]:
    decoder = _DECODERS.get(("", row_type))
    if decoder is None:
        decoder = _DECODERS["", row_type] = msgspec.json.Decoder(row_type)
    return decoder
