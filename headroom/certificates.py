"""X.509 certificates made locally with ``cryptography``: a private certificate authority that issues server
and client certificates (the local secure broker, its users, tests of TLS and mTLS), and the self-signed
certificate a TLS listener serves when it is given none (the ext_proc convention). Keys are ECDSA P-256;
private keys are written PKCS#8 PEM, readable by their owner only, as is a model-signing key's pair
(:func:`write_signing_key`).

>>> ca = CertificateAuthority.create("headroom test CA")
>>> pair = ca.issue("router", hosts=("127.0.0.1", "localhost"))
>>> pair.certificate_pem.startswith(b"-----BEGIN CERTIFICATE-----")
True
>>> subject_name(pair.certificate_pem)
'router'
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from headroom.contract.signing import SigningKey

DEFAULT_DAYS = 365


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, PEM-encoded."""

    certificate_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """``<name>.pem`` and ``<name>.key`` (mode 0600) in ``directory``; returns their paths."""
        directory.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
        cert_path.write_bytes(self.certificate_pem)
        write_private(key_path, self.key_pem)
        return cert_path, key_path


@dataclass(frozen=True)
class CertificateAuthority:
    """A private CA: its own certificate and key, and the certificates it issues."""

    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(cls, common_name: str, days: int = DEFAULT_DAYS) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        certificate = (_builder(name, name, key.public_key(), days)
                       .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                       .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                    content_commitment=False, key_encipherment=False,
                                                    data_encipherment=False, key_agreement=False,
                                                    encipher_only=False, decipher_only=False), critical=True)
                       .sign(key, hashes.SHA256()))
        return cls(certificate, key)

    @classmethod
    def load(cls, certificate_path: Path, key_path: Path) -> CertificateAuthority:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{key_path}: not an EC private key")
        return cls(x509.load_pem_x509_certificate(certificate_path.read_bytes()), key)

    @property
    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def write(self, directory: Path, name: str = "ca") -> tuple[Path, Path]:
        return KeyPair(self.certificate_pem, _private_pem(self.key)).write(directory, name)

    def issue(self, common_name: str, hosts: tuple[str, ...] = (), days: int = DEFAULT_DAYS) -> KeyPair:
        """A certificate for ``common_name``, good for TLS servers at ``hosts`` (IP addresses or DNS names) and
        for TLS clients."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        builder = (_builder(subject, self.certificate.subject, key.public_key(), days)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if hosts:
            builder = builder.add_extension(x509.SubjectAlternativeName([_general_name(h) for h in hosts]),
                                            critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        return KeyPair(certificate.public_bytes(serialization.Encoding.PEM), _private_pem(key))


def self_signed(hosts: tuple[str, ...], organization: str = "headroom", days: int = 3650) -> KeyPair:
    """A self-signed server certificate for ``hosts``, made in memory (a listener's certificate when it is
    given none)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
                      x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    certificate = (_builder(name, name, key.public_key(), days)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
                   .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in hosts]), critical=False)
                   .sign(key, hashes.SHA256()))
    return KeyPair(certificate.public_bytes(serialization.Encoding.PEM), _private_pem(key))


def subject_name(certificate_pem: bytes) -> str:
    """The common name of a PEM certificate's subject."""
    names = x509.load_pem_x509_certificate(certificate_pem).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


def write_signing_key(key: SigningKey, directory: Path, name: str) -> tuple[Path, Path]:
    """``<name>.key`` (private, mode 0600) and ``<name>.pub`` of a model-signing key in ``directory``; never
    overwrites either."""
    private, public = directory / f"{name}.key", directory / f"{name}.pub"
    for path in (private, public):
        if path.exists():
            raise FileExistsError(f"{path} exists; a key pair is never overwritten")
    write_private(private, key.private_pem())
    public.write_bytes(key.public_pem())
    return private, public


def write_private(path: Path, data: bytes) -> None:
    """Write a secret to ``path``, readable and writable by its owner only from the first byte on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    path.chmod(0o600)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
             days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days)))


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
