"""The bulk reader accepts exactly what the scalar validator accepts, with the same values, on both of its paths."""

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headroom.contract import telemetry_frame
from headroom.contract.server_state import MAX_COUNT, MAX_LATENCY_MS
from headroom.contract.telemetry import MAX_INTEGER, InvalidRecord, decode, encode
from headroom.contract.telemetry_frame import COLUMNS, records_frame
from tests.contract.records import valid_record
from tests.contract.test_telemetry import JSON_VALUES

FIELD_NAMES = sorted(json.loads(encode(valid_record())))
COMPACT = (",", ":")  # how encode() separates: the spelling the columnar path reads
VALID = encode(valid_record())


def assert_agrees_with_validator(values: list) -> None:
    frame, rejected = records_frame(values)
    expected, reasons = [], []
    for row, value in enumerate(values):
        try:
            expected.append(decode(value))
        except InvalidRecord as err:
            reasons.append((row, err.reason))
    assert rejected == reasons
    assert frame.columns == COLUMNS
    rows = frame.to_dicts()
    assert len(rows) == len(expected)
    for row, record in zip(rows, expected):
        for name in COLUMNS:
            got, want = row[name], getattr(record, name)
            if name == "model_versions" and got is not None:
                got = {k: v for k, v in got.items() if v is not None}
                want = {k: v for k, v in want.items() if k in got}
            assert got == want, name
            if isinstance(want, float):
                assert math.copysign(1.0, got) == math.copysign(1.0, want), name


def columnar_leftovers(values: list) -> list[int]:
    """The rows the columnar path passes on to the general one."""
    frames, others = [], []
    telemetry_frame._columnar(values, list(range(len(values))), frames, others)
    return sorted(others)


@st.composite
def garbled(draw) -> bytes:
    body = json.loads(encode(valid_record(request_id=f"r{draw(st.integers(0, 10**6))}")))
    for name in draw(st.lists(st.sampled_from([*FIELD_NAMES, "unknown"]), max_size=2)):
        if draw(st.booleans()):
            body.pop(name, None)
        else:
            body[name] = draw(JSON_VALUES | st.floats() | st.integers(-5, 5) | st.integers(-2**64, 2**64))
    text = json.dumps(body, separators=draw(st.sampled_from([COMPACT, (", ", ": ")])))
    if draw(st.integers(0, 4)) == 0:  # a repeated key, spelled the way encode() would
        name = draw(st.sampled_from(FIELD_NAMES))
        text = text[:-1] + f',"{name}":{json.dumps(draw(JSON_VALUES | st.integers(0, 9)))}}}'
    return text.encode() if draw(st.integers(0, 30)) else draw(st.binary(max_size=30))


@settings(max_examples=300, deadline=None)
@given(st.lists(garbled(), max_size=80))
def test_bulk_reader_agrees_with_the_validator(values):
    assert_agrees_with_validator(values)


def replace(field: str, spelled: str) -> bytes:
    """The valid record with one field's value spelled differently."""
    body = json.loads(VALID)
    text = json.dumps(body, separators=COMPACT)
    value = json.dumps(body[field], separators=COMPACT)
    return text.replace(f'"{field}":{value}', f'"{field}":{spelled}', 1).encode()


def drop(field: str) -> bytes:
    body = json.loads(VALID)
    body.pop(field)
    return json.dumps(body, separators=COMPACT).encode()


def append(extra: str) -> bytes:
    return VALID[:-1] + f",{extra}}}".encode()


ODD_VALUES = {
    "repeated key": append('"prompt_tokens":7'),
    "repeated text key": append('"request_id":"other"'),
    "unknown key": append('"colour":"blue"'),
    "unknown nested key": append('"extra":{"a":[1,"x"]}'),
    "text from a number": replace("request_id", "12"),
    "text from a number, spelled elsewhere": replace("request_id", "12")[:-1] + b',"x":{"request_id":"12"}}',
    "text from a number beside an unknown key": replace("server_id", "7")[:-1] + b',"x":1}',
    "text from a boolean": replace("pool_key", "true"),
    "text from an object": replace("pool_key", '{"a":"b"}'),
    "text from an array": replace("pool_key", '["a"]'),
    "text that looks like a number": replace("request_id", '"12"'),
    "text that looks like an object": replace("request_id", '"{x}"'),
    "empty text": replace("server_id", '""'),
    "text of 257 characters": replace("server_id", json.dumps("s" * 257)),
    "non-ASCII text": replace("server_id", '"gpu-ü-Ω"'),
    "non-ASCII text of 256 characters": replace("server_id", json.dumps("ü" * 256, ensure_ascii=False)),
    "escaped text": replace("server_id", '"a\\"b"'),
    "invalid UTF-8": replace("server_id", '"x"').replace(b'"x"', b'"\xff"'),
    "null optional field": replace("slo_tpot_ms", "null"),
    "null required field": replace("prompt_tokens", "null"),
    "null max_tokens": replace("max_tokens", "null"),
    "missing max_tokens": drop("max_tokens"),
    "missing required field": drop("e2e_ms"),
    "missing version": drop("v"),
    "version 2": replace("v", "2"),
    "version 1.0": replace("v", "1.0"),
    "version true": replace("v", "true"),
    "version as text": replace("v", '"1"'),
    "count 1.0": replace("prompt_tokens", "1.0"),
    "count 1e2": replace("prompt_tokens", "1e2"),
    "negative count": replace("num_waiting", "-1"),
    "count 2^53": replace("prompt_tokens", str(2**53)),
    "count beyond int64": replace("prompt_tokens", str(2**70)),
    "priority below -(2^53 - 1)": replace("priority", str(-(2**53))),
    "negative priority": replace("priority", "-3"),
    "latency as text": replace("e2e_ms", '"5"'),
    "latency NaN": replace("e2e_ms", "NaN"),
    "latency Infinity": replace("e2e_ms", "Infinity"),
    "latency 1e400": replace("e2e_ms", "1e400"),
    "latency -0.0": replace("slo_ttft_ms", "-0.0"),
    "latency as a 25-digit integer": replace("e2e_ms", "1234567890123456789012345"),
    "latency 5e-324": replace("tpot_ms", "5e-324"),
    "fraction above 1": replace("kv_cache_usage", "1.0000000000000002"),
    "fraction 1": replace("kv_cache_usage", "1"),
    "flag as number": replace("stream", "1"),
    "versions with an unknown target": replace("model_versions", '{"ttft":3,"other":4}'),
    "versions with a null entry": replace("model_versions", '{"ttft":null}'),
    "versions with a float": replace("model_versions", '{"ttft":1.0}'),
    "versions negative": replace("model_versions", '{"ttft":-1}'),
    "versions beyond 2^53": replace("model_versions", '{"ttft":' + str(MAX_INTEGER + 1) + "}"),
    "versions repeated": replace("model_versions", '{"ttft":1,"ttft":2}'),
    "versions empty": replace("model_versions", "{}"),
    "versions as array": replace("model_versions", "[1]"),
    "completion before dispatch": replace("completion_ts", "1.0"),
    "ttft above e2e": replace("ttft_ms", "5000.0"),
    "zero SLO": replace("slo_ttft_ms", "0"),
    "encoder match beyond the input": append('"encoder_input_size":1,"encoder_matched_size":2'),
    "encoder match without an input": append('"encoder_matched_size":1'),
    "spaced separators": json.dumps(json.loads(VALID)).encode(),
    "leading and trailing space": b"  " + VALID + b"  ",
    "tab between tokens": VALID.replace(b'"stream":', b'"stream":\t'),
    "pretty-printed over lines": json.dumps(json.loads(VALID), indent=1).encode(),
    "carriage return": VALID + b"\r",
    "two records in one value": VALID + b"\n" + VALID,
    "byte-order mark": b"\xef\xbb\xbf" + VALID,
    "blank": b"   ",
    "empty": b"",
    "an array": b"[1,2]",
    "a number": b"5",
    "not JSON": b"junk",
    "over the size limit": replace("server_id", json.dumps("s" * 200))[:-1] + b"," + b",".join(
        f'"k{i}":{i}'.encode() for i in range(2000)) + b"}",
}


@pytest.mark.parametrize("odd", ODD_VALUES.values(), ids=ODD_VALUES.keys())
def test_an_odd_value_among_valid_ones_is_read_as_the_validator_reads_it(odd):
    values = [encode(valid_record(request_id=f"r{i}")) for i in range(100)]
    values[37] = odd
    assert_agrees_with_validator(values)


def test_a_value_that_is_not_bytes_is_rejected_with_the_validators_reason():
    values = [VALID, None, VALID]
    frame, rejected = records_frame(values)
    assert frame.height == 2
    assert rejected == [(1, "record must be bytes, got NoneType")]


def test_a_lone_surrogate_in_a_text_is_refused_with_a_reason():
    values = [VALID, replace("server_id", '"a\\ud800"'), VALID]
    decode(values[1])  # the validator lets it through; no text column can hold it
    frame, rejected = records_frame(values)
    assert frame.height == 2
    assert rejected == [(1, "field 'server_id' holds a lone surrogate, which is not text")]


@st.composite
def encoded_records(draw) -> bytes:
    """Records as encode() writes them, with values of every magnitude."""
    latency = st.floats(min_value=0.0, max_value=MAX_LATENCY_MS, allow_nan=False, allow_infinity=False)
    time = st.floats(min_value=0.0, max_value=1e300, allow_nan=False, allow_infinity=False)
    stream = draw(st.booleans())
    e2e = draw(latency)
    record = valid_record(
        request_id=draw(st.text(st.characters(min_codepoint=32, max_codepoint=126, exclude_characters='"\\'),
                                min_size=1, max_size=40)),
        stream=stream, e2e_ms=e2e, ttft_ms=min(draw(latency), e2e) if stream else None,
        tpot_ms=draw(latency) if stream else None, prompt_tokens=draw(st.integers(0, MAX_COUNT)),
        priority=draw(st.integers(-MAX_INTEGER, MAX_INTEGER)),
        kv_cache_usage=draw(st.floats(0.0, 1.0)), arrival_ts=draw(time),
        predicted_e2e_ms=draw(st.none() | latency), slo_ttft_ms=draw(st.none() | st.floats(1e-300, MAX_LATENCY_MS)),
        model_versions=draw(st.none() | st.dictionaries(st.sampled_from(["ttft", "tpot", "e2e"]),
                                                        st.integers(0, MAX_INTEGER))))
    return encode(record)


@settings(max_examples=200, deadline=None)
@given(st.lists(encoded_records(), min_size=1, max_size=40))
def test_records_as_encode_writes_them_take_the_columnar_path_with_exact_values(values):
    assert columnar_leftovers(values) == []
    assert_agrees_with_validator(values)


def test_clean_input_is_read_in_order():
    values = [encode(valid_record(request_id=f"r{i}")) for i in range(1000)]
    frame, rejected = records_frame(values)
    assert rejected == [] and frame.height == 1000
    assert frame["request_id"].to_list() == [f"r{i}" for i in range(1000)]
    assert columnar_leftovers(values) == []


def test_one_unreadable_value_leaves_the_rest_of_a_large_batch_on_the_columnar_path():
    values = [encode(valid_record(request_id=f"r{i}")) for i in range(5000)]
    values[4321] = b"junk"
    assert len(columnar_leftovers(values)) < telemetry_frame.SMALL_PARSE
    frame, rejected = records_frame(values)
    assert frame.height == 4999 and [row for row, _ in rejected] == [4321]
