"""The key tests sign model updates with, the trust that accepts them, and a second key for rotation.

Fixed keys (made from a seed) so a message signed in one test process verifies in another: a worker
subprocess signs with :data:`TEST_KEY` written to a file (:func:`write_private_key`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from headroom.certificates import write_private
from headroom.contract.signing import SigningKey, TrustedKeys


def seeded_key(seed: str) -> SigningKey:
    return SigningKey(Ed25519PrivateKey.from_private_bytes(hashlib.sha256(seed.encode()).digest()))


TEST_KEY = seeded_key("headroom tests")
NEXT_KEY = seeded_key("headroom tests, the next key")  # the key a rotation moves to
TRUST = TrustedKeys([TEST_KEY.public_key])


def write_private_key(directory: Path, key: SigningKey = TEST_KEY) -> Path:
    path = directory / f"signing-{key.key_id}.key"
    write_private(path, key.private_pem())
    return path


def write_public_key(directory: Path, key: SigningKey = TEST_KEY) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{key.key_id}.pub"
    path.write_bytes(key.public_pem())
    return path
