"""contract.signing: signed model-update messages, trusted keys and their settings."""

import dataclasses

import pytest

from headroom.certificates import write_signing_key
from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.model_update import RejectedUpdate, decode_update, encode_update, make_update
from headroom.contract.settings import SettingsError, from_env
from headroom.contract.signing import SIGNED_MAGIC, SigningKey, SigningSettings, TrustedKeys, key_id
from tests.keys import NEXT_KEY, TEST_KEY, TRUST, write_public_key


def update(**changes):
    fields = dict(model=b"{\"learner\": {}}", version=7, pool_key="h100", target="ttft", objective="mean",
                  feature_schema=FEATURE_SCHEMA, model_format="json", created_at=1.7e9)
    return make_update(**{**fields, **changes})


def rejection(raw: bytes, trust: TrustedKeys = TRUST) -> str:
    with pytest.raises(RejectedUpdate) as rejected:
        decode_update(raw, trust)
    return rejected.value.reason


def test_a_signed_update_round_trips_with_its_signer():
    decoded = decode_update(TEST_KEY.sign(encode_update(update())), TRUST)
    assert decoded == dataclasses.replace(update(), signer=TEST_KEY.key_id)
    assert TEST_KEY.key_id == key_id(TEST_KEY.public_key) and len(TEST_KEY.key_id) == 16


def test_the_signature_covers_every_byte():
    signed = TEST_KEY.sign(encode_update(update()))
    for index in (0, 5, 20, 80, len(signed) // 2, len(signed) - 1):  # magic, key id, signature, header, model
        forged = bytearray(signed)
        forged[index] ^= 0x01
        assert rejection(bytes(forged)) in ("bad-signature", "unknown-key", "unsigned"), index


@pytest.mark.parametrize("make_raw, reason", [
    pytest.param(lambda: encode_update(update()), "unsigned", id="unsigned"),
    pytest.param(lambda: SigningKey.generate().sign(encode_update(update())), "unknown-key", id="another-key"),
    pytest.param(lambda: TEST_KEY.sign(encode_update(update()))[:40], "bad-signature", id="truncated"),
    pytest.param(lambda: TEST_KEY.sign(encode_update(update()))[:76] + encode_update(update(version=99)),
                 "bad-signature", id="message-swapped-under-a-signature"),
    pytest.param(lambda: SIGNED_MAGIC + bytes.fromhex(TEST_KEY.key_id) + bytes(64) + encode_update(update()),
                 "bad-signature", id="trusted-key-id-forged-signature"),
])
def test_what_a_reader_rejects(make_raw, reason):
    assert rejection(make_raw()) == reason


def test_allowing_unsigned_admits_unsigned_messages_only():
    lenient = TrustedKeys([TEST_KEY.public_key], allow_unsigned=True)
    assert decode_update(encode_update(update()), lenient).signer is None
    assert rejection(SigningKey.generate().sign(encode_update(update())), lenient) == "unknown-key"


def test_two_trusted_keys_for_a_rotation_and_the_old_one_retired():
    both = TrustedKeys([TEST_KEY.public_key, NEXT_KEY.public_key])
    for key in (TEST_KEY, NEXT_KEY):
        assert decode_update(key.sign(encode_update(update())), both).signer == key.key_id
    assert rejection(TEST_KEY.sign(encode_update(update())), TrustedKeys([NEXT_KEY.public_key])) == "unknown-key"


def test_settings_read_keys_from_files_or_a_directory(tmp_path):
    files = [write_public_key(tmp_path / "keys", key) for key in (TEST_KEY, NEXT_KEY)]
    listed = from_env(SigningSettings, {"HEADROOM_MODEL_TRUSTED_KEYS": ",".join(map(str, files))}).trust()
    folder = from_env(SigningSettings, {"HEADROOM_MODEL_TRUSTED_KEYS": str(tmp_path / "keys")}).trust()
    assert set(listed.keys) == set(folder.keys) == {TEST_KEY.key_id, NEXT_KEY.key_id}
    assert not listed.allow_unsigned


def test_a_signer_trusts_its_own_key_and_loads_it_from_its_file(tmp_path):
    private, _ = write_signing_key(TEST_KEY, tmp_path, "worker")
    settings = from_env(SigningSettings, {"HEADROOM_MODEL_SIGNING_KEY_FILE": str(private)})
    own = settings.signing_key()
    assert own is not None and own.key_id == TEST_KEY.key_id and private.stat().st_mode & 0o077 == 0
    assert set(settings.trust(own=own).keys) == {TEST_KEY.key_id}
    with pytest.raises(FileExistsError):
        write_signing_key(TEST_KEY, tmp_path, "worker")


@pytest.mark.parametrize("environ, message", [
    pytest.param({}, "no trusted model-signing keys", id="none"),
    pytest.param({"HEADROOM_MODEL_TRUSTED_KEYS": "/nowhere/key.pub"}, "not a readable public key", id="missing"),
    pytest.param({"HEADROOM_MODEL_SIGNING_KEY_FILE": "/nowhere/key"}, "not a readable Ed25519 private key",
                 id="missing-private"),
])
def test_settings_errors_name_the_variable(environ, message):
    settings = from_env(SigningSettings, environ)
    with pytest.raises(SettingsError, match=message):
        settings.signing_key()
        settings.trust()


def test_an_rsa_key_is_not_a_signing_key(tmp_path, pki):
    with pytest.raises(SettingsError, match="not a readable public key|not an Ed25519"):
        from_env(SigningSettings, {"HEADROOM_MODEL_TRUSTED_KEYS": str(pki.server[0])}).trust()
