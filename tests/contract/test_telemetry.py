import dataclasses
import enum
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headroom.contract.telemetry import MAX_RECORD_BYTES, InvalidRecord, TelemetryRecord, decode, encode, validate
from tests.contract.records import valid_record


def wire(**changes) -> dict:
    """The wire object of a valid record with fields changed (None removes a field)."""
    body = json.loads(encode(valid_record()))
    for name, value in changes.items():
        if value is None:
            body.pop(name, None)
        else:
            body[name] = value
    return body


def raw(body: dict) -> bytes:
    return json.dumps(body).encode()  # allow_nan: NaN / Infinity reach the validator as JSON tokens


def test_round_trip_keeps_every_field():
    record = valid_record()
    assert decode(encode(record)) == record


def test_optional_fields_may_be_absent():
    record = decode(raw(wire(stream=False, ttft_ms=None, tpot_ms=None, predicted_ttft_ms=None,
                             predicted_tpot_ms=None, model_versions=None, slo_ttft_ms=None, slo_tpot_ms=None,
                             priority=None, max_tokens=None)))
    assert record.ttft_ms is None and record.priority == 0 and record.max_tokens == 0


REJECTIONS = [
    ("not-json", b"{not json", "not valid JSON"),
    ("not-utf8", b"\xff\xfe{}", "not UTF-8"),
    ("array", b"[1, 2]", "must be a JSON object, got array"),
    ("oversized", b" " * (MAX_RECORD_BYTES + 1), f"over the {MAX_RECORD_BYTES}-byte limit"),
    ("no-version", raw(wire(v=None)), "missing field 'v'"),
    ("future-version", raw(wire(v=2)), "unknown schema version 2"),
    ("missing-field", raw(wire(e2e_ms=None)), "missing field 'e2e_ms'"),
    ("unknown-field", raw(wire(colour="red")), "unknown field 'colour'"),
    ("wrong-type-number", raw(wire(kv_cache_usage="0.4")), "'kv_cache_usage' must be a number, got string"),
    ("wrong-type-int", raw(wire(prompt_tokens=10.5)), "'prompt_tokens' must be an integer, got number"),
    ("bool-is-not-int", raw(wire(num_waiting=True)), "'num_waiting' must be an integer, got boolean"),
    ("wrong-type-stream", raw(wire(stream="yes")), "'stream' must be true or false"),
    ("empty-id", raw(wire(request_id="")), "'request_id' must have 1 to 256 characters"),
    ("nan", raw(wire(ttft_ms=math.nan)), "'ttft_ms' must be finite, got nan"),
    ("infinity", raw(wire(e2e_ms=math.inf)), "'e2e_ms' must be finite, got inf"),
    ("negative-latency", raw(wire(tpot_ms=-1.0)), "'tpot_ms' is a latency and must be within [0, 3600000] ms"),
    ("implausible-latency", raw(wire(e2e_ms=1e300, ttft_ms=1.0)), "'e2e_ms' is a latency and must be within"),
    ("negative-count", raw(wire(output_tokens=-3)), "'output_tokens' is a count and must be within [0, 1000000000], "
                                                    "got -3"),
    ("implausible-count", raw(wire(prompt_tokens=10**12)), "'prompt_tokens' is a count and must be within"),
    ("fraction-over-1", raw(wire(prefix_match=1.5)), "'prefix_match' is a fraction and must be within [0, 1]"),
    ("fraction-under-0", raw(wire(kv_cache_usage=-0.1)), "'kv_cache_usage' is a fraction"),
    ("completion-before-dispatch", raw(wire(completion_ts=1.0)), "is before dispatch_ts"),
    ("streaming-without-latencies", raw(wire(ttft_ms=None, tpot_ms=None)),
     "streaming record carries neither 'ttft_ms' nor 'tpot_ms'"),
    ("streaming-without-tpot", raw(wire(tpot_ms=None)), "missing field 'tpot_ms'"),
    ("ttft-after-e2e", raw(wire(ttft_ms=5000.0)), "ttft_ms 5000.0 exceeds e2e_ms"),
    ("zero-slo", raw(wire(slo_ttft_ms=0)), "an SLO of 0 ms cannot be met"),
    ("encoder-match-beyond-input", raw(wire(encoder_input_size=2, encoder_matched_size=3)),
     "encoder_matched_size 3 exceeds encoder_input_size 2"),
    ("bad-versions", raw(wire(model_versions={"ttft": "3"})), "'model_versions' entry 'ttft'"),
    ("weight-under-1", raw(wire(sample_weight=0.5)), "'sample_weight' is how many requests the record stands for"),
    ("weight-huge", raw(wire(sample_weight=1e9)), "must be within [1, 1e+06]"),
]


@pytest.mark.parametrize(("data", "reason"), [(d, r) for _, d, r in REJECTIONS], ids=[i for i, _, _ in REJECTIONS])
def test_rejections_say_why(data: bytes, reason: str):
    with pytest.raises(InvalidRecord) as caught:
        decode(data)
    assert reason in caught.value.reason


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_garbled_records_are_valid_or_rejected_with_a_reason(data):
    body = wire()
    for name in data.draw(st.lists(st.sampled_from(sorted(body) + ["extra"]), max_size=4)):
        if data.draw(st.booleans()):
            body.pop(name, None)
        else:
            body[name] = data.draw(JSON_VALUES)
    try:
        record = decode(json.dumps(body).encode())
    except InvalidRecord as err:
        assert err.reason
    else:
        assert isinstance(record, TelemetryRecord)
        assert decode(encode(record)) == record


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_are_rejected_with_a_reason(data: bytes):
    with pytest.raises(InvalidRecord) as caught:
        decode(data)
    assert caught.value.reason


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_fast_path_agrees_with_the_field_by_field_validator(data):
    from headroom.contract.telemetry import _decode_field_by_field

    body = wire()
    for name in data.draw(st.lists(st.sampled_from(sorted(body) + ["extra"]), max_size=3)):
        body[name] = data.draw(JSON_VALUES | st.floats(allow_nan=False) | st.integers(-2**64, 2**64) | st.just(10**400))
    raw_bytes = json.dumps(body).encode()
    outcomes = []
    for reader in (decode, _decode_field_by_field):
        try:
            outcomes.append(reader(raw_bytes))
        except InvalidRecord as err:
            outcomes.append(err.reason)
    assert typed(outcomes[0]) == typed(outcomes[1])


class Level(enum.IntEnum):
    TWO = 2


PYTHON_VALUES = (JSON_VALUES | st.floats() | st.integers(-2**64, 2**64) | st.sampled_from(
    [math.inf, -math.inf, math.nan, 10**400, np.float64(1.5), np.int64(3), np.bool_(True), Level.TWO]))


def typed(outcome):
    """A record's values with their types (1 and 1.0 differ), or a refusal's reason."""
    return [(type(v), v) for v in dataclasses.astuple(outcome)] if isinstance(outcome, TelemetryRecord) else outcome


@pytest.mark.parametrize("changes", [{"prompt_tokens": Level.TWO}, {"model_versions": {"ttft": Level.TWO}}])
def test_an_int_subclass_is_taken_as_its_int_on_both_paths(changes):
    from headroom.contract.telemetry import _validate_field_by_field

    records = validate(wire(**changes)), _validate_field_by_field(wire(**changes))
    assert typed(records[0]) == typed(records[1])
    assert all(type(v) is int for record in records for v in (record.prompt_tokens, *record.model_versions.values()))


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_validate_fast_path_agrees_with_the_field_by_field_validator_on_python_objects(data):
    from headroom.contract.telemetry import _validate_field_by_field

    body = wire()
    for name in data.draw(st.lists(st.sampled_from(sorted(body) + ["extra"]), max_size=3)):
        body[name] = data.draw(PYTHON_VALUES)
    outcomes = []
    for check in (validate, _validate_field_by_field):
        try:
            outcomes.append(check(dict(body)))
        except InvalidRecord as err:
            outcomes.append(err.reason)
    assert typed(outcomes[0]) == typed(outcomes[1])


@pytest.mark.parametrize("value", [math.inf, math.nan, -1.0, np.float64(1.7e9), True])
def test_validate_refuses_a_time_that_is_no_valid_unix_time(value):
    with pytest.raises(InvalidRecord, match="arrival_ts"):
        validate(wire(arrival_ts=value))


@pytest.mark.parametrize("field", ["e2e_ms", "kv_cache_usage", "prompt_tokens"])
def test_an_integer_past_the_largest_float_is_refused_naming_its_field_on_every_path(field):
    huge = json.dumps(wire(**{field: 10**400})).encode()
    for check in (lambda: decode(huge), lambda: validate(wire(**{field: 10**400}))):
        with pytest.raises(InvalidRecord, match=f"{field}.*an integer of 1329 bits"):
            check()


def test_a_record_stands_for_one_request_unless_it_says_how_many():
    record = decode(raw(wire()))
    assert record.sample_weight == 1.0
    assert decode(encode(dataclasses.replace(record, sample_weight=12.5))).sample_weight == 12.5
