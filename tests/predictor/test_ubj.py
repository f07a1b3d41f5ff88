"""The UBJ reader: XGBoost's models read as XGBoost writes them, and every malformed document refused by name."""

import json
import struct

import numpy as np
import pytest

from headroom.predictor import ubj
from headroom.predictor.forest import UnsupportedModel, forest_from_model
from tests.predictor.models import train


def _plain(value):
    """A decoded document as JSON would hold it (arrays as lists, floats as the float32 XGBoost stores)."""
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return float(np.float32(value)) if isinstance(value, float) else value


def _encode(value) -> bytes:
    """A small UBJ writer for documents XGBoost would not write."""
    def text(s: str) -> bytes:
        raw = s.encode()
        return b"L" + struct.pack(">q", len(raw)) + raw
    if isinstance(value, dict):
        return b"{" + b"".join(text(k) + _encode(v) for k, v in value.items()) + b"}"
    if isinstance(value, np.ndarray):
        marker = {"i": b"l", "f": b"d", "u": b"U"}[value.dtype.kind]
        form = {b"l": ">i4", b"d": ">f4", b"U": ">u1"}[marker]
        return b"[$" + marker + b"#L" + struct.pack(">q", len(value)) + value.astype(form).tobytes()
    if isinstance(value, list):
        return b"[" + b"".join(map(_encode, value)) + b"]"
    if isinstance(value, str):
        return b"S" + text(value)
    if isinstance(value, bool):
        return b"T" if value else b"F"
    if isinstance(value, int):
        return b"L" + struct.pack(">q", value)
    return b"D" + struct.pack(">d", value)


def test_an_xgboost_model_reads_as_its_json_does():
    booster = train(seed=3, trees=7, depth=4)
    booster.set_attr(note="kept")
    decoded = ubj.decode(bytes(booster.save_raw("ubj")))
    assert _plain(decoded) == _plain(json.loads(bytes(booster.save_raw("json"))))
    tree = decoded["learner"]["gradient_booster"]["model"]["trees"][0]
    assert tree["split_conditions"].dtype == np.dtype(">f4") and tree["left_children"].dtype == np.dtype(">i4")
    assert decoded["learner"]["attributes"]["note"] == "kept"


def test_every_ubjson_form_reads():
    counted_object = b"{#U\x02" + b"U\x01aZ" + b"U\x01bC!"
    assert ubj.decode(counted_object) == {"a": None, "b": "!"}
    assert ubj.decode(b"[$S#U\x02U\x02hiU\x00") == ["hi", ""]
    assert ubj.decode(b"[Ni\xffNI\x01\x00TFD" + struct.pack(">d", 2.5) + b"]") == [-1, 256, True, False, 2.5]
    np.testing.assert_array_equal(ubj.decode(b"[$I#i\x02\x00\x01\xff\xff"), np.array([1, -1], dtype=np.int16))


@pytest.mark.parametrize(("raw", "says"), [
    (b"", "truncated"),
    (b"[$d#L" + struct.pack(">q", 10**12), "longer than"),
    (b"[#L" + struct.pack(">q", 10**9) + b"Z", "longer than"),
    (b"{L" + struct.pack(">q", 3) + b"ab", "truncated"),
    (b"[U\x01", "truncated"),
    (b"{U\x01a", "truncated"),
    (b"[" * 40 + b"]" * 40, "nested deeper"),
    (b"[]]", "after the end"),
    (b"X", "unknown marker"),
    (b"SdAB", "length must be an integer"),
    (b"Si\xfeab", "negative length"),
    (b"[$U[]", "needs a count"),
    (b"SU\x02\xff\xfe", "not UTF-8"),
])
def test_a_malformed_document_is_refused_by_name(raw, says):
    with pytest.raises(ubj.UbjError, match=says):
        ubj.decode(raw)


def test_a_ubj_model_missing_a_part_is_refused_by_name():
    document = ubj.decode(bytes(train(trees=3, depth=2).save_raw("ubj")))
    del document["learner"]["gradient_booster"]["model"]["trees"][1]["split_conditions"]
    with pytest.raises(UnsupportedModel, match="split_conditions"):
        forest_from_model(_encode(document))
    document["learner"]["gradient_booster"]["model"]["trees"] = "none"
    with pytest.raises(UnsupportedModel, match="'trees'"):
        forest_from_model(_encode(document))
    with pytest.raises(UnsupportedModel, match="not an XGBoost tree model: truncated"):
        forest_from_model(bytes(train(trees=3, depth=2).save_raw("ubj"))[:-40])


def test_written_again_by_the_test_writer_a_model_gives_the_same_forest():
    booster = train(seed=8, trees=5, depth=3)
    raw = bytes(booster.save_raw("ubj"))
    original, again = forest_from_model(raw), forest_from_model(_encode(ubj.decode(raw)))
    np.testing.assert_array_equal(original.leaves, again.leaves)
    np.testing.assert_array_equal(original.features, again.features)
