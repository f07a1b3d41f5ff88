"""Ed25519 signatures on model updates: who may publish a model that routers and predictors will serve.

A checksum only proves that a message's model matches its own header, which a forger writes too; a
signature proves the message comes from a holder of a signing key the reader trusts. The worker signs each
encoded update (:func:`~contract.model_update.encode_update` with a :class:`SigningKey`); every reader opens
it with its :class:`TrustedKeys` before it parses anything (:func:`~contract.model_update.decode_update`).

Signed message: ``SIGNED_MAGIC`` (4 bytes), the key id (8 bytes), the Ed25519 signature (64 bytes), then the
update message exactly as encoded. The signature covers the magic, the key id and the message, so the
signed bytes are the bytes sent: nothing is re-encoded to be checked. A key's id is the first 8 bytes of
the SHA-256 of its raw public key (16 hex digits when shown).

A reader trusts a set of public keys, two at once while a key is rotated: publish with the new key once
every reader trusts both, retire the old one once every model it signed has been superseded. A message is
rejected, with a reason, when it is ``unsigned``, signed by an ``unknown-key`` or has a ``bad-signature``.
Only :attr:`TrustedKeys.allow_unsigned` (a local experiment's setting, never a default) lets an unsigned
message through; a signed one is checked all the same.

>>> key = SigningKey.generate()
>>> trust = TrustedKeys([key.public_key])
>>> message = b"HRMU..."
>>> trust.open(key.sign(message)) == (message, key.key_id)
True
>>> try:
...     trust.open(message)
... except RejectedUpdate as rejected:
...     print(rejected.reason)
unsigned
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from headroom.contract.model_update import ModelBounds, RejectedUpdate
from headroom.contract.settings import SettingsError, nested, setting

SIGNED_MAGIC = b"HRMS"
KEY_ID_BYTES = 8
SIGNATURE_BYTES = 64
_HEADER = struct.Struct(f">4s{KEY_ID_BYTES}s{SIGNATURE_BYTES}s")


def key_id(public_key: Ed25519PublicKey) -> str:
    """The key's id: 16 hex digits of the SHA-256 of its raw bytes."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:2 * KEY_ID_BYTES]


class SigningKey:
    """An Ed25519 private key that signs model-update messages."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._private_key = private_key
        self.public_key = private_key.public_key()
        self.key_id = key_id(self.public_key)
        self._id_bytes = bytes.fromhex(self.key_id)

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def load(cls, path: Path) -> SigningKey:
        """A private key from a PEM file (PKCS#8, unencrypted: it is given as a mounted Secret)."""
        try:
            private_key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as err:
            raise SettingsError(f"HEADROOM_MODEL_SIGNING_KEY_FILE={path}: not a readable Ed25519 private key in PEM "
                                f"({err})") from err
        if not isinstance(private_key, Ed25519PrivateKey):
            raise SettingsError(f"HEADROOM_MODEL_SIGNING_KEY_FILE={path}: a {type(private_key).__name__}, not an "
                                "Ed25519 private key")
        return cls(private_key)

    def sign(self, message: bytes) -> bytes:
        """``message`` as a signed message."""
        signature = self._private_key.sign(SIGNED_MAGIC + self._id_bytes + message)
        return _HEADER.pack(SIGNED_MAGIC, self._id_bytes, signature) + message

    def private_pem(self) -> bytes:
        return self._private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption())

    def public_pem(self) -> bytes:
        return public_pem(self.public_key)


def public_pem(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        public_key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError) as err:
        raise SettingsError(f"HEADROOM_MODEL_TRUSTED_KEYS: {path} is not a readable public key in PEM ({err})") from err
    if not isinstance(public_key, Ed25519PublicKey):
        raise SettingsError(f"HEADROOM_MODEL_TRUSTED_KEYS: {path} holds a {type(public_key).__name__}, not an Ed25519 "
                            "public key")
    return public_key


class TrustedKeys:
    """The public keys a reader accepts model updates from, by key id, and the bounds within which it takes a
    model they signed (:class:`~contract.model_update.ModelBounds`)."""

    def __init__(self, keys: Iterable[Ed25519PublicKey] = (), *, allow_unsigned: bool = False,
                 bounds: ModelBounds = ModelBounds()) -> None:
        self.keys = {key_id(key): key for key in keys}
        self.allow_unsigned = allow_unsigned
        self.bounds = bounds

    def __repr__(self) -> str:
        return f"TrustedKeys({sorted(self.keys)}, allow_unsigned={self.allow_unsigned}, {self.bounds})"

    def open(self, raw: bytes) -> tuple[bytes, str | None]:
        """The message inside ``raw`` and the id of the key that signed it (None: unsigned, and allowed).
        Raises :class:`~contract.model_update.RejectedUpdate` with reason ``unsigned``, ``unknown-key`` or
        ``bad-signature``."""
        raw = bytes(raw)
        if raw[:4] != SIGNED_MAGIC:
            if self.allow_unsigned:
                return raw, None
            raise RejectedUpdate("unsigned", "the message carries no signature; this reader accepts only updates "
                                             "signed by a trusted key")
        if len(raw) < _HEADER.size:
            raise RejectedUpdate("bad-signature", f"a signed message of {len(raw)} bytes is shorter than its "
                                                  f"{_HEADER.size}-byte signature header")
        _, id_bytes, signature = _HEADER.unpack_from(raw)
        signer = id_bytes.hex()
        public_key = self.keys.get(signer)
        if public_key is None:
            raise RejectedUpdate("unknown-key", f"signed by key {signer}, which is not among the trusted keys "
                                                f"({', '.join(sorted(self.keys)) or 'none'})")
        message = raw[_HEADER.size:]
        try:
            public_key.verify(signature, SIGNED_MAGIC + id_bytes + message)
        except InvalidSignature:
            raise RejectedUpdate("bad-signature", f"the signature does not match the message for key {signer}: "
                                                  "it was altered or forged") from None
        return message, signer


@dataclass(frozen=True)
class SigningSettings:
    """Which key signs the models this process publishes, and which keys it trusts the models it reads from."""

    signing_key_file: Path | None = setting(None, "HEADROOM_MODEL_SIGNING_KEY_FILE",
                                            "The worker's Ed25519 private key (PEM) that signs every model it publishes.")
    trusted_keys: str = setting("", "HEADROOM_MODEL_TRUSTED_KEYS", "Comma-separated Ed25519 public keys (PEM "
                                "files), or one directory of them (a mounted Secret), that models must be signed by.")
    allow_unsigned: bool = setting(False, "HEADROOM_MODEL_ALLOW_UNSIGNED", "Also accept unsigned models, and "
                                   "publish unsigned without a key: a local experiment's setting, never production's.")
    bounds: ModelBounds = nested(ModelBounds, "The largest model a reader takes, however well signed.")

    def signing_key(self) -> SigningKey | None:
        return None if self.signing_key_file is None else SigningKey.load(self.signing_key_file)

    def trust(self, own: SigningKey | None = None) -> TrustedKeys:
        """The trusted keys (and ``own``, the key this process signs with); raises when there are none and
        unsigned models are not allowed either, since such a reader could never serve a model."""
        paths = _key_paths(self.trusted_keys)
        keys = [load_public_key(path) for path in paths] + ([own.public_key] if own else [])
        if not keys and not self.allow_unsigned:
            raise SettingsError("no trusted model-signing keys: set HEADROOM_MODEL_TRUSTED_KEYS to the public key(s) "
                                "the worker signs with (`headroom models keygen` makes a pair)")
        return TrustedKeys(keys, allow_unsigned=self.allow_unsigned, bounds=self.bounds)


def _key_paths(spec: str) -> list[Path]:
    parts = [Path(part.strip()) for part in spec.split(",") if part.strip()]
    if len(parts) == 1 and parts[0].is_dir():
        found = sorted(p for p in parts[0].iterdir() if not p.name.startswith(".") and p.is_file())
        if not found:
            raise SettingsError(f"HEADROOM_MODEL_TRUSTED_KEYS={spec}: the directory holds no key file")
        return found
    return parts
