"""TLS of headroom's own listeners and of the clients that call them, declared once.

:class:`ServerTls` is the certificate every TLS listener of a process serves — the predictor's gRPC server,
the router's Pick, ext_proc and HTTP listeners — and, when a client CA is given, the CA whose certificates
clients must present (mTLS). :class:`PredictorClientTls` is how the router (and any other client of the
prediction servers) checks their certificates and presents its own. :mod:`headroom.tls` turns both into gRPC
credentials and SSL contexts. Files are PEM, mounted from Secrets; they are read when a listener or channel
is made, so a rotated certificate takes effect at the next start.

>>> ServerTls(client_ca_file=Path("ca.pem"))
Traceback (most recent call last):
...
headroom.contract.settings.SettingsError: HEADROOM_TLS_CLIENT_CA_FILE needs HEADROOM_TLS_CERT_FILE and HEADROOM_TLS_KEY_FILE: clients can only present certificates over TLS
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headroom.contract.settings import SettingsError, setting


@dataclass(frozen=True)
class ServerTls:
    """The certificate of this process's TLS listeners, and the CA that makes them require client certificates."""

    cert_file: Path | None = setting(None, "HEADROOM_TLS_CERT_FILE", "Server certificate (PEM) of this process's "
                                     "gRPC and HTTP listeners; set, they speak TLS.")
    key_file: Path | None = setting(None, "HEADROOM_TLS_KEY_FILE", "Private key (PEM) of the server certificate.")
    client_ca_file: Path | None = setting(None, "HEADROOM_TLS_CLIENT_CA_FILE", "When set, clients must present a "
                                          "certificate signed by this CA (PEM): mTLS.")

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise SettingsError("HEADROOM_TLS_CERT_FILE and HEADROOM_TLS_KEY_FILE go together")
        if self.client_ca_file is not None and self.cert_file is None:
            raise SettingsError("HEADROOM_TLS_CLIENT_CA_FILE needs HEADROOM_TLS_CERT_FILE and HEADROOM_TLS_KEY_FILE: "
                                "clients can only present certificates over TLS")

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None


@dataclass(frozen=True)
class PredictorClientTls:
    """How a client reaches headroom's prediction servers over TLS (off while no file is given)."""

    ca_file: Path | None = setting(None, "HEADROOM_PREDICTOR_TLS_CA_FILE", "CA (PEM) the prediction servers' "
                                   "certificates are checked against; any of these three turns TLS on.")
    cert_file: Path | None = setting(None, "HEADROOM_PREDICTOR_TLS_CERT_FILE", "Client certificate (PEM) for "
                                     "prediction servers that require one (mTLS).")
    key_file: Path | None = setting(None, "HEADROOM_PREDICTOR_TLS_KEY_FILE", "Private key (PEM) of the client "
                                    "certificate.")

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise SettingsError("HEADROOM_PREDICTOR_TLS_CERT_FILE and HEADROOM_PREDICTOR_TLS_KEY_FILE go together")

    @property
    def enabled(self) -> bool:
        return self.ca_file is not None or self.cert_file is not None
