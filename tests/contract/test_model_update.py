import dataclasses
import json

import numpy as np
import pytest

from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.model_update import (
    MAGIC,
    InvalidUpdate,
    decode_update,
    encode_update,
    make_update,
    model_key,
    refusal,
    to_milliseconds,
)
from headroom.contract.signing import TrustedKeys

FORMAT_ONLY = TrustedKeys(allow_unsigned=True)  # these tests are about the message; tests/contract/test_signing.py signs it


def update(**changes):
    fields = dict(model=b"{\"learner\": {}}", version=7, pool_key="h100", target="ttft", objective="quantile",
                  quantile=0.9, feature_schema=FEATURE_SCHEMA, model_format="json", created_at=1.7e9,
                  window_stats={"rows": 1200}, holdout_metrics={"mae": 3.5}, drift_reason="adwin on ttft")
    fields.update(changes)
    return make_update(**fields)


def test_round_trip_and_key():
    original = update()
    decoded = decode_update(encode_update(original), FORMAT_ONLY)
    assert decoded == original
    assert decoded.key == model_key("h100", "ttft", "quantile") == "h100/ttft/quantile"


def test_tampered_model_bytes_fail_the_checksum():
    data = bytearray(encode_update(update()))
    data[-2] ^= 0xFF
    with pytest.raises(InvalidUpdate, match="checksum mismatch"):
        decode_update(bytes(data), FORMAT_ONLY)


@pytest.mark.parametrize(("data", "reason"), [
    (b"PK\x03\x04rest", "not a model-update message"),
    (encode_update(update())[:20], "truncated model-update message"),
    (b"HRMU\x00\x00\x00\x02{]", "header is not valid JSON"),
], ids=["wrong-magic", "truncated", "bad-header"])
def test_malformed_messages(data, reason):
    with pytest.raises(InvalidUpdate, match=reason):
        decode_update(data, FORMAT_ONLY)


@pytest.mark.parametrize(("changes", "reason"), [
    ({"target": "latency"}, "unknown target 'latency'"),
    ({"objective": "median"}, "unknown objective 'median'"),
    ({"quantile": None}, "quantile model needs a quantile"),
    ({"model_format": "pickle"}, "unknown model format 'pickle'"),
    ({"version": 0}, "version must be a positive integer"),
    ({"version": 2**53}, "beyond the largest allowed, 2\\^53 - 1"),
    ({"output_transform": "sqrt"}, "unknown output transform 'sqrt'"),
], ids=["target", "objective", "quantile", "format", "version", "version-too-large", "transform"])
def test_bad_metadata_is_rejected(changes, reason):
    with pytest.raises(InvalidUpdate, match=reason):
        decode_update(encode_update(dataclasses.replace(update(), **changes)), FORMAT_ONLY)


def test_output_transform_round_trips_and_defaults_to_identity_for_older_writers():
    assert decode_update(encode_update(update(output_transform="log")), FORMAT_ONLY).output_transform == "log"
    raw = encode_update(update())
    length = int.from_bytes(raw[4:8], "big")
    header = json.loads(raw[8:8 + length])
    del header["output_transform"]  # a message written before the field existed
    old = json.dumps(header).encode()
    older = MAGIC + len(old).to_bytes(4, "big") + old + raw[8 + length:]
    assert decode_update(older, FORMAT_ONLY).output_transform == "identity"


@pytest.mark.parametrize(("transform", "raw", "expected"), [
    ("identity", [-2.0, 0.0, 35.5], [-2.0, 0.0, 35.5]),
    ("log", [-2.0, 0.0, np.log(35.5)], [np.exp(-2.0), 1.0, 35.5]),
], ids=["identity", "log"])
def test_to_milliseconds(transform, raw, expected):
    np.testing.assert_allclose(to_milliseconds(np.array(raw), transform), expected, rtol=1e-12)


def test_to_milliseconds_rejects_an_unknown_transform():
    with pytest.raises(ValueError, match="unknown output transform 'sqrt'"):
        to_milliseconds(np.zeros(2), "sqrt")


@pytest.mark.parametrize(("version", "held", "refused"), [
    pytest.param(1, None, None, id="first"), pytest.param(2**53 - 1, None, None, id="first-at-the-top"),
    pytest.param(8, 7, None, id="next"), pytest.param(1007, 7, None, id="at-the-jump"),
    pytest.param(7, 7, "stale", id="same"), pytest.param(6, 7, "replayed", id="older"),
    pytest.param(1008, 7, "version", id="beyond-the-jump"), pytest.param(10**9, 7, "version", id="far-beyond")])
def test_a_version_must_be_newer_and_lead_the_held_one_by_at_most_the_jump(version, held, refused):
    outcome = refusal(update(version=version), held, max_jump=1000)
    assert (outcome and outcome.reason) == refused
    assert outcome is None or "held version" in outcome.detail
    if refused == "version":
        assert f"ahead of the held version {held}" in outcome.detail


