"""TLS for headroom's listeners and clients, made in one place from :mod:`contract.tls`: gRPC server and
channel credentials, and SSL contexts for the HTTP listeners.

A listener given no certificate may still serve TLS with a self-signed one (:func:`self_signed_pair`):
the ext_proc server does, as the Gateway API Inference Extension's endpoint picker does, so a gateway can
reach it over TLS without a certificate being provisioned.
"""

from __future__ import annotations

import socket
import ssl

import grpc

from headroom.certificates import KeyPair, self_signed
from headroom.contract.tls import PredictorClientTls, ServerTls


def server_pair(tls: ServerTls) -> KeyPair | None:
    """The listener's certificate and key from ``tls``; None when it has none."""
    if tls.cert_file is None or tls.key_file is None:
        return None
    return KeyPair(tls.cert_file.read_bytes(), tls.key_file.read_bytes())


def self_signed_pair(host: str) -> KeyPair:
    """A self-signed certificate for this machine: ``host`` (unless a wildcard), its name, localhost, 127.0.0.1."""
    names = [name for name in (host, socket.gethostname(), "localhost", "127.0.0.1")
             if name and name not in ("0.0.0.0", "::", "[::]")]
    return self_signed(tuple(dict.fromkeys(names)))


def grpc_server_credentials(pair: KeyPair, tls: ServerTls) -> grpc.ServerCredentials:
    """Credentials serving ``pair``, requiring a client certificate from ``tls.client_ca_file`` when set."""
    client_ca = tls.client_ca_file.read_bytes() if tls.client_ca_file else None
    return grpc.ssl_server_credentials([(pair.key_pem, pair.certificate_pem)], root_certificates=client_ca,
                                       require_client_auth=client_ca is not None)


def ssl_server_context(tls: ServerTls) -> ssl.SSLContext | None:
    """An HTTP listener's SSL context with the certificate of ``tls``, requiring client certificates from
    ``tls.client_ca_file`` when set; None when ``tls`` has no certificate (plain HTTP)."""
    if tls.cert_file is None or tls.key_file is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    if tls.client_ca_file is not None:
        context.load_verify_locations(cafile=str(tls.client_ca_file))
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def channel_credentials(tls: PredictorClientTls) -> grpc.ChannelCredentials | None:
    """Credentials of a TLS channel to the prediction servers; None when TLS is off."""
    if not tls.enabled:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=tls.ca_file.read_bytes() if tls.ca_file else None,
        private_key=tls.key_file.read_bytes() if tls.key_file else None,
        certificate_chain=tls.cert_file.read_bytes() if tls.cert_file else None)


def channel(address: str, credentials: grpc.ChannelCredentials | None,
            options: list[tuple[str, object]] | None = None) -> grpc.Channel:
    """A channel to ``address``: TLS with ``credentials``, plaintext without."""
    if credentials is None:
        return grpc.insecure_channel(address, options=options)
    return grpc.secure_channel(address, credentials, options=options)
