"""The completed-request telemetry record: one per request, produced when its response completes.

It carries what the router knew at dispatch (the chosen server's state, the prompt), what happened
(TTFT, TPOT, E2E in milliseconds), and the prediction that was used, so the pipeline sees live error.

Wire format: UTF-8 JSON object with ``"v": SCHEMA_VERSION`` and the fields below, at most
``MAX_RECORD_BYTES``, keyed on the telemetry topic by :func:`partition_key` (the pool key). :func:`decode`
returns a record or raises :class:`InvalidRecord` whose ``reason`` says exactly what is wrong; it never
raises anything else on any input.

Streaming records (``stream`` true) carry ``ttft_ms`` (time to the first streamed token) and ``tpot_ms``
(mean time per output token after the first, in tokens) and train the TTFT and TPOT models — a streaming
record that observed only one of them (a training sample, :mod:`headroom.llmd_terms`) carries that one and
trains that model alone; non-streaming records carry ``e2e_ms`` and train the E2E model. Every record
carries ``e2e_ms``.

Counts and latencies have plausible upper bounds (:data:`contract.server_state.KIND_RANGES`): a record
claiming a request of more than an hour, or a billion tokens, is refused like a negative one.
:func:`check_field` applies a field's rule on its own, for the APIs that take measurements in.

A router may send only a sample of its records, per stratum (:mod:`router.control.telemetry_sampler`); each record
sent then carries ``sample_weight``, the number of completed requests it stands for (1 / the probability
it was sent; 1 when every record is sent), so the requests behind the telemetry can still be counted.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

from headroom.contract.server_state import (
    KIND_RANGES,
    MAX_COUNT,
    MAX_LATENCY_MS,
    SERVER_FIELDS,
    ServerState,
    encoder_excess,
)
from headroom.errors import HeadroomError

SCHEMA_VERSION = 1
MAX_RECORD_BYTES = 16 * 1024
MAX_ID_CHARS = 256
MAX_INTEGER = 2**53 - 1  # integers JSON readers everywhere hold exactly
MAX_SAMPLE_WEIGHT = 1e6  # a record stands for at most this many requests
TTFT_SLACK_MS = 1.0  # ttft may exceed e2e by clock rounding, not more


class InvalidRecord(HeadroomError, ValueError):
    """A telemetry record that must not be trained on; ``reason`` is the precise cause."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True, kw_only=True)
class TelemetryRecord(ServerState):
    """One completed request: the request, the chosen server's state at dispatch (the fields of
    :class:`~contract.server_state.ServerState`), what was measured, and the prediction that was used."""

    request_id: str
    server_id: str
    pool_key: str
    stream: bool
    arrival_ts: float  # unix seconds, at the router
    dispatch_ts: float
    completion_ts: float
    prompt_tokens: int
    output_tokens: int
    e2e_ms: float
    max_tokens: int = 0  # the request's output cap; 0 when unknown
    encoder_input_size: int = 0  # the request's multimodal encoder input (contract.features.REQUEST_FIELDS)
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    predicted_e2e_ms: float | None = None
    model_versions: dict[str, int] | None = None  # target -> version of the prediction used
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    priority: int = 0
    retries: int = 0  # servers the router tried before this one (they failed before the first byte)
    ejections: int = 0  # servers this request's failed attempts ejected from the pool (router.state.outliers)
    sample_weight: float = 1.0  # completed requests this record stands for (1 / the probability it was sent)


_FIELDS = {f.name: f for f in dataclasses.fields(TelemetryRecord)}
# Each field's kind: "text", "flag", "integer", "count", "time", "fraction", "latency" or "versions"; the
# server's state declares the kinds of its fields (contract.server_state).
_RECORD_KINDS = {
    **dict.fromkeys(("request_id", "server_id", "pool_key"), "text"),
    "stream": "flag",
    **dict.fromkeys(("arrival_ts", "dispatch_ts", "completion_ts"), "time"),
    **dict.fromkeys(("prompt_tokens", "output_tokens", "max_tokens", "encoder_input_size", "retries", "ejections"),
                    "count"),
    **dict.fromkeys(("e2e_ms", "ttft_ms", "tpot_ms", "predicted_ttft_ms", "predicted_tpot_ms", "predicted_e2e_ms",
                     "slo_ttft_ms", "slo_tpot_ms"), "latency"),
    "model_versions": "versions",
    "priority": "integer",
    "sample_weight": "weight",
}
FIELD_KINDS = {name: SERVER_FIELDS[name].kind if name in SERVER_FIELDS else _RECORD_KINDS[name] for name in _FIELDS}
REQUIRED_FIELDS = tuple(n for n, f in _FIELDS.items() if f.default is dataclasses.MISSING)
FIELD_DEFAULTS = {n: f.default for n, f in _FIELDS.items() if f.default is not dataclasses.MISSING}


def encode(record: TelemetryRecord) -> bytes:
    """The record's wire bytes (optional fields that are unset are left out)."""
    body: dict[str, Any] = {"v": SCHEMA_VERSION}
    for name in _FIELDS:
        value = getattr(record, name)
        if value is not None:
            body[name] = value
    return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()


def partition_key(record: TelemetryRecord) -> bytes:
    """The record's Kafka key: its pool key, so a pool's records share a partition (its
    :func:`~contract.partitions.home_partition`) and the worker that owns it holds the pool's whole window."""
    return record.pool_key.encode()


def decode(raw: bytes | None) -> TelemetryRecord:
    """Parse and validate wire bytes (None, a record without a value, is refused); raises :class:`InvalidRecord`
    with the reason.

    The fast path decodes with msgspec against :data:`WIRE_TYPE` (types and value ranges of
    ``FIELD_KINDS``); anything it refuses takes the field-by-field path, which is the one that says why.
    """
    if isinstance(raw, (bytes, bytearray)) and len(raw) <= MAX_RECORD_BYTES:
        record = _wire_record(_WIRE_DECODER.decode, raw)
        if record is not None:
            return record
    return _decode_field_by_field(raw)


def _wire_record(read: Callable[[Any], Any], source: Any) -> TelemetryRecord | None:
    """The record of what ``read`` (msgspec, against :data:`WIRE_TYPE`) makes of ``source``; None when it refuses
    it or the schema version is not this one."""
    try:
        wire: Any = read(source)  # a WIRE_TYPE, made at run time
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if wire.v != SCHEMA_VERSION:
        return None
    record: TelemetryRecord = msgspec.convert(wire, TelemetryRecord, from_attributes=True)  # same types: cannot fail
    _check_consistency(record)
    return record


def _decode_field_by_field(raw: bytes | None) -> TelemetryRecord:
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raise InvalidRecord(f"record must be bytes, got {type(raw).__name__}")
    if len(raw) > MAX_RECORD_BYTES:
        raise InvalidRecord(f"record is {len(raw)} bytes, over the {MAX_RECORD_BYTES}-byte limit")
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as err:
        raise InvalidRecord(f"not UTF-8: {err.reason} at byte {err.start}") from None
    try:
        body = json.loads(text)  # NaN / Infinity parse, then fail the finiteness check with their field
    except (ValueError, RecursionError) as err:
        raise InvalidRecord(f"not valid JSON: {err}") from None
    return _validate_field_by_field(body)


def validate(body: Any) -> TelemetryRecord:
    """Check a decoded JSON object (or one built of the same Python types); raises :class:`InvalidRecord` with
    the reason. As in :func:`decode`, the fast path converts it with msgspec against :data:`WIRE_TYPE` (strictly:
    no bool for a number, no numpy scalar; an int subclass such as an IntEnum as its int, as field by field);
    anything it refuses, or a body that is no plain ``dict``, is checked field by field, which says why."""
    record = _wire_record(_CONVERT_STRICT, body) if type(body) is dict else None
    return record if record is not None else _validate_field_by_field(body)


def _validate_field_by_field(body: Any) -> TelemetryRecord:
    if not isinstance(body, dict):
        raise InvalidRecord(f"record must be a JSON object, got {_kind(body)}")
    version = body.get("v")
    if version is None:
        raise InvalidRecord("missing field 'v' (schema version)")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise InvalidRecord(f"unknown schema version {version!r} (this reader knows {SCHEMA_VERSION})")
    unknown = sorted(set(body) - set(_FIELDS) - {"v"})
    if unknown:
        raise InvalidRecord(f"unknown field {unknown[0]!r}")
    for name in REQUIRED_FIELDS:
        if body.get(name) is None:
            raise InvalidRecord(f"missing field {name!r}")
    values: dict[str, Any] = {name: _CHECKS[FIELD_KINDS[name]](name, value)
                              for name, value in body.items() if name != "v" and value is not None}
    record = TelemetryRecord(**values)
    _check_consistency(record)
    return record


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidRecord(f"field {name!r} must be a string, got {_kind(value)}")
    if not value or len(value) > MAX_ID_CHARS:
        raise InvalidRecord(f"field {name!r} must have 1 to {MAX_ID_CHARS} characters, got {len(value)}")
    return value


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidRecord(f"field {name!r} must be true or false, got {_kind(value)}")
    return value


def _integer(name: str, value: Any) -> int:
    if not _is_integer(value):
        raise InvalidRecord(f"field {name!r} must be an integer, got {_kind(value)}")
    number = int(value)  # an int subclass (an IntEnum) as its value
    if abs(number) > MAX_INTEGER:
        raise InvalidRecord(f"field {name!r} is out of range (|value| > 2^53 - 1), got {_integer_shown(number)}")
    return number


def _is_integer(value: Any) -> bool:
    """An int or an int subclass but a bool, as msgspec's strict conversion takes them."""
    return isinstance(value, int) and not isinstance(value, bool)


def _integer_shown(value: int) -> str:
    """``value`` as a message shows it: its digits, or for a huge one its size."""
    return str(value) if value.bit_length() <= 128 else f"an integer of {value.bit_length()} bits"


def _count(name: str, value: Any) -> int:
    _integer(name, value)
    if not 0 <= value <= MAX_COUNT:
        raise InvalidRecord(f"field {name!r} is a count and must be within [0, {MAX_COUNT}], got {value}")
    return int(value)


def _number(name: str, value: Any) -> float:
    if type(value) is not float and not _is_integer(value):
        raise InvalidRecord(f"field {name!r} must be a number, got {_kind(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer past the largest float
        raise InvalidRecord(f"field {name!r} must be finite, got {_integer_shown(value)}") from None
    if not math.isfinite(number):
        raise InvalidRecord(f"field {name!r} must be finite, got {value}")
    return number


def _fraction(name: str, value: Any) -> float:
    number = _number(name, value)
    if not 0.0 <= number <= 1.0:
        raise InvalidRecord(f"field {name!r} is a fraction and must be within [0, 1], got {number}")
    return number


def _latency(name: str, value: Any) -> float:
    number = _number(name, value)
    if not 0 <= number <= MAX_LATENCY_MS:
        raise InvalidRecord(f"field {name!r} is a latency and must be within [0, {MAX_LATENCY_MS:.0f}] ms, "
                            f"got {number}")
    return number


def _time(name: str, value: Any) -> float:
    number = _number(name, value)
    if number < 0:
        raise InvalidRecord(f"field {name!r} is a unix time and must not be negative, got {number}")
    return number


def _weight(name: str, value: Any) -> float:
    number = _number(name, value)
    if not 1.0 <= number <= MAX_SAMPLE_WEIGHT:
        raise InvalidRecord(f"field {name!r} is how many requests the record stands for and must be within "
                            f"[1, {MAX_SAMPLE_WEIGHT:g}], got {number}")
    return number


def _versions(_name: str, value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise InvalidRecord(f"field 'model_versions' must be an object of target -> version, got {_kind(value)}")
    for target, version in value.items():
        if not _is_integer(version) or not 0 <= version <= MAX_INTEGER:
            raise InvalidRecord(f"field 'model_versions' entry {target!r} must be a non-negative integer, "
                                f"got {_kind(version)}")
    return {target: int(version) for target, version in value.items()}


def _check_consistency(record: TelemetryRecord) -> None:
    if record.completion_ts < record.dispatch_ts:
        raise InvalidRecord(f"completion_ts {record.completion_ts} is before dispatch_ts {record.dispatch_ts}")
    if record.stream and record.ttft_ms is None and record.tpot_ms is None:
        raise InvalidRecord("streaming record carries neither 'ttft_ms' nor 'tpot_ms'")
    if record.stream and record.output_tokens > 1 and record.tpot_ms is None:
        raise InvalidRecord("streaming record with more than one output token is missing field 'tpot_ms'")
    if record.ttft_ms is not None and record.ttft_ms > record.e2e_ms + TTFT_SLACK_MS:
        raise InvalidRecord(f"ttft_ms {record.ttft_ms} exceeds e2e_ms {record.e2e_ms}")
    if record.slo_ttft_ms == 0 or record.slo_tpot_ms == 0:
        raise InvalidRecord("an SLO of 0 ms cannot be met; leave the field out when there is no SLO")
    if excess := encoder_excess(record.encoder_matched_size, record.encoder_input_size):
        raise InvalidRecord(next(iter(excess.values())))


_WIRE_CONSTRAINTS = {
    "text": msgspec.Meta(min_length=1, max_length=MAX_ID_CHARS),
    "integer": msgspec.Meta(ge=-MAX_INTEGER, le=MAX_INTEGER), "time": msgspec.Meta(ge=0, le=sys.float_info.max),
    **{kind: msgspec.Meta(ge=low, le=high) for kind, (low, high) in KIND_RANGES.items()},
    "weight": msgspec.Meta(ge=1, le=MAX_SAMPLE_WEIGHT)}


def _wire_type(name: str, hint: Any) -> Any:
    """The field's type for msgspec, with the value range its kind allows."""
    kind = FIELD_KINDS[name]
    if kind == "versions":
        return dict[str, Annotated[int, msgspec.Meta(ge=0, le=MAX_INTEGER)]] | None
    optional = type(None) in typing.get_args(hint)
    base = next((arg for arg in typing.get_args(hint) if arg is not type(None)), hint) if optional else hint
    constrained = Annotated[base, _WIRE_CONSTRAINTS[kind]] if kind in _WIRE_CONSTRAINTS else base
    return constrained | None if optional else constrained


_HINTS = typing.get_type_hints(TelemetryRecord)
WIRE_TYPE = msgspec.defstruct(
    "WireRecord",
    [("v", int)] + [(f.name, _wire_type(f.name, _HINTS[f.name])) if f.default is dataclasses.MISSING
                    else (f.name, _wire_type(f.name, _HINTS[f.name]), f.default)
                    for f in dataclasses.fields(TelemetryRecord)],
    forbid_unknown_fields=True, kw_only=True)
_WIRE_DECODER = msgspec.json.Decoder(WIRE_TYPE)
_CONVERT_STRICT = functools.partial(msgspec.convert, type=WIRE_TYPE, strict=True)

_CHECKS = {"text": _text, "flag": _flag, "integer": _integer, "count": _count, "time": _time,
           "fraction": _fraction, "latency": _latency, "weight": _weight, "versions": _versions}


def check_field(name: str, value: Any) -> Any:
    """``value`` as field ``name`` of a record holds it; raises :class:`InvalidRecord` saying why it cannot."""
    return _CHECKS[FIELD_KINDS[name]](name, value)


def _kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null",
            int: "integer", float: "number"}.get(type(value), type(value).__name__)
