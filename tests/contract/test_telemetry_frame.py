"""The bulk reader accepts exactly what the scalar validator accepts, with the same values."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from contract.telemetry import InvalidRecord, decode, encode
from contract.telemetry_frame import COLUMNS, records_frame
from tests.contract.records import valid_record
from tests.contract.test_telemetry import JSON_VALUES

FIELD_NAMES = sorted(json.loads(encode(valid_record())))


@st.composite
def garbled(draw) -> bytes:
    body = json.loads(encode(valid_record(request_id=f"r{draw(st.integers(0, 10**6))}")))
    for name in draw(st.lists(st.sampled_from(FIELD_NAMES), max_size=2)):
        if draw(st.booleans()):
            body.pop(name, None)
        else:
            body[name] = draw(JSON_VALUES | st.floats() | st.integers(-5, 5))
    return json.dumps(body).encode() if draw(st.integers(0, 30)) else draw(st.binary(max_size=30))


@settings(max_examples=150, deadline=None)
@given(st.lists(garbled(), max_size=80))
def test_bulk_reader_agrees_with_the_validator(values):
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


def test_clean_input_takes_one_parse():
    values = [encode(valid_record(request_id=f"r{i}")) for i in range(1000)]
    frame, rejected = records_frame(values)
    assert rejected == [] and frame.height == 1000
    assert frame["request_id"].to_list() == [f"r{i}" for i in range(1000)]
