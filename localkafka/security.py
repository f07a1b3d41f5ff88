"""The local broker's secure mode (``headroom kafka up --secure``): its certificates, users and credentials.

Everything is made locally, once, under ``<state_dir>/kafka/security`` (secrets readable by their owner only):

- ``ca.pem`` / ``ca.key`` — a private certificate authority; ``broker.pem`` / ``broker.key`` — the broker's
  certificate (for 127.0.0.1 and localhost; its CN ``broker`` is a super user);
- ``users/<user>.password`` — each user's password, given to the broker as SCRAM-SHA-512 and SCRAM-SHA-256
  credentials when its storage is formatted and as a PLAIN user; ``users/<user>.pem`` / ``.key`` — a client
  certificate per user for the certificate-authenticated TLS listener (principal: the CN, the user's name);
- ``oauth/issuer.key`` / ``oauth/jwks.json`` — a local token issuer: :func:`mint_token` signs the JWTs the
  broker accepts for OAUTHBEARER (ES256, checked against the JWKS file);
- ``clients/<user>.env`` — the ``HEADROOM_KAFKA_*`` variables a component sets to connect as that user.

Its users (:func:`users`) are ``admin``, a super user, and the principals of
:func:`localkafka.strimzi.grants`, each with only its component's grants (:mod:`localkafka.acls`).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from headroom.certificates import CertificateAuthority, write_private
from headroom.contract.kafka_security import KafkaSecurity
from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.localkafka.settings import BrokerSettings

SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
OAUTH_AUDIENCE = "headroom-kafka"
OAUTH_ISSUER = "headroom-local"
HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class Layout:
    """Where the secure mode's files are."""

    root: Path

    @property
    def ca(self) -> Path:
        return self.root / "ca.pem"

    @property
    def broker(self) -> tuple[Path, Path]:
        return self.root / "broker.pem", self.root / "broker.key"

    @property
    def issuer_key(self) -> Path:
        return self.root / "oauth" / "issuer.key"

    @property
    def jwks(self) -> Path:
        return self.root / "oauth" / "jwks.json"

    def password_file(self, user: str) -> Path:
        return self.root / "users" / f"{user}.password"

    def certificate(self, user: str) -> tuple[Path, Path]:
        return self.root / "users" / f"{user}.pem", self.root / "users" / f"{user}.key"

    def env_file(self, user: str) -> Path:
        return self.root / "clients" / f"{user}.env"


def users() -> tuple[str, ...]:
    """``admin`` and each component's user: ``headroom-worker``, ``headroom-router``, ..."""
    from headroom.localkafka.strimzi import grants

    return ("admin", *grants(KafkaSettings()))


def layout(settings: BrokerSettings) -> Layout:
    return Layout(settings.home / "security")


def prepare(settings: BrokerSettings) -> Layout:
    """Make whatever of the CA, certificates, passwords, token issuer and env files is missing."""
    files = layout(settings)
    if not files.ca.exists():
        ca = CertificateAuthority.create("headroom local Kafka CA")
        ca.write(files.root)
        ca.issue("broker", HOSTS).write(files.root, "broker")
    ca = CertificateAuthority.load(files.ca, files.root / "ca.key")
    for user in users():
        if not files.password_file(user).exists():
            write_private(files.password_file(user), secrets.token_urlsafe(24).encode())
        if not files.certificate(user)[0].exists():
            ca.issue(user).write(files.root / "users", user)
    if not files.issuer_key.exists():
        key = ec.generate_private_key(ec.SECP256R1())
        write_private(files.issuer_key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
        files.jwks.write_text(json.dumps({"keys": [_jwk(key.public_key())]}))
    for user in users():
        _write_env(files.env_file(user), client(settings, user))
    return files


def password(settings: BrokerSettings, user: str) -> str:
    return layout(settings).password_file(user).read_text().strip()


def listener_values(settings: BrokerSettings) -> dict[str, str]:
    """The values of the secure listeners' placeholders (``infra/kafka/listeners-secure.properties``)."""
    files = layout(settings)
    certificate, key = (path.read_text() for path in files.broker)
    plain_users = " ".join(f'user_{user}="{password(settings, user)}"' for user in users())
    return {"ssl_port": str(settings.ssl_port), "broker_certificate": _one_line(certificate),
            "broker_key": _one_line(key), "ca_file": str(files.ca.resolve()), "plain_users": plain_users,
            "jwks_url": files.jwks.resolve().as_uri(), "oauth_audience": OAUTH_AUDIENCE, "oauth_issuer": OAUTH_ISSUER}


def scram_arguments(settings: BrokerSettings) -> list[str]:
    """The storage tool's ``--add-scram`` arguments that create every user's SCRAM credentials at format time."""
    return [argument for user in users() for mechanism in SCRAM_MECHANISMS
            for argument in ("--add-scram", f"{mechanism}=[name={user},password={password(settings, user)}]")]


def jvm_flags(settings: BrokerSettings) -> list[str]:
    """The broker may read the local issuer's JWKS file (Kafka allows no token-key URL it is not told of)."""
    return [f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={layout(settings).jwks.resolve().as_uri()}"]


def client(settings: BrokerSettings, user: str = "admin", mechanism: str = "SCRAM-SHA-512",
           base: KafkaSettings | None = None) -> KafkaSettings:
    """How ``user`` reaches the local broker: SASL_SSL with ``mechanism`` (a SCRAM one or PLAIN), or ``"SSL"``
    with the user's certificate on the TLS listener; plain PLAINTEXT when the broker is not secure. Topic
    settings come from ``base`` (the defaults when None)."""
    base = base or from_env(KafkaSettings, {})
    if not settings.secure:
        return dataclasses.replace(base, bootstrap_servers=settings.bootstrap, security=KafkaSecurity())
    files = layout(settings)
    if mechanism == "SSL":
        cert, key = files.certificate(user)
        return dataclasses.replace(base, bootstrap_servers=f"127.0.0.1:{settings.ssl_port}", security=KafkaSecurity(
            protocol="SSL", ssl_ca_file=files.ca.resolve(), ssl_cert_file=cert.resolve(), ssl_key_file=key.resolve()))
    return dataclasses.replace(base, bootstrap_servers=settings.bootstrap, security=KafkaSecurity(
        protocol="SASL_SSL", sasl_mechanism=mechanism, sasl_username=user,
        sasl_password_file=files.password_file(user).resolve(), ssl_ca_file=files.ca.resolve()))


def mint_token(settings: BrokerSettings, subject: str, lifetime_s: float = 3600.0) -> tuple[str, float]:
    """A JWT for ``subject`` signed by the local issuer, and its expiry (unix seconds): an OAUTHBEARER token
    the secure broker accepts as ``User:<subject>``."""
    key = serialization.load_pem_private_key(layout(settings).issuer_key.read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    now = time.time()
    header = {"alg": "ES256", "typ": "JWT", "kid": _key_id(key.public_key())}
    expiry = int(now + lifetime_s)
    claims = {"sub": subject, "iss": OAUTH_ISSUER, "aud": OAUTH_AUDIENCE, "iat": int(now), "exp": expiry}
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
    return f"{signing_input}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}", float(expiry)


def _write_env(path: Path, kafka: KafkaSettings) -> None:
    security = kafka.security
    lines = {"HEADROOM_KAFKA_BOOTSTRAP": kafka.bootstrap_servers,
             "HEADROOM_KAFKA_SECURITY_PROTOCOL": security.protocol,
             "HEADROOM_KAFKA_SASL_MECHANISM": security.sasl_mechanism,
             "HEADROOM_KAFKA_SASL_USERNAME": security.sasl_username,
             "HEADROOM_KAFKA_SASL_PASSWORD_FILE": security.sasl_password_file,
             "HEADROOM_KAFKA_SSL_CA_FILE": security.ssl_ca_file}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{name}={value}\n" for name, value in lines.items() if value))


def _jwk(public_key: ec.EllipticCurvePublicKey) -> dict[str, str]:
    numbers = public_key.public_numbers()
    return {"kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": _key_id(public_key),
            "x": _b64(numbers.x.to_bytes(32, "big")), "y": _b64(numbers.y.to_bytes(32, "big"))}


def _key_id(public_key: ec.EllipticCurvePublicKey) -> str:
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    digest = hashes.Hash(hashes.SHA256())
    digest.update(der)
    return digest.finalize().hex()[:16]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _one_line(pem: str) -> str:
    """A PEM block as one properties value (``\\n`` escapes, which the broker reads back as line breaks)."""
    return pem.strip().replace("\n", "\\n")
