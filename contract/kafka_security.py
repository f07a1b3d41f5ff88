"""How every Kafka client of headroom authenticates and encrypts: one settings object, nested in
:class:`~contract.topics.KafkaSettings`, turned into librdkafka options and Faust credentials by
:mod:`headroom.kafka_auth` and nowhere else.

``security.protocol`` is PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL. SASL mechanisms: PLAIN, SCRAM-SHA-256
and SCRAM-SHA-512 (a user name and a password) and OAUTHBEARER (a token provider: ``module:callable``
returning ``(token, expiry in unix seconds)``; :mod:`headroom.google_kafka` is one for Google's managed
Kafka). TLS: a CA bundle, and a client certificate and key for brokers that authenticate clients by
certificate (Strimzi's ``tls`` users). The password comes from a file (a mounted Secret) or the environment,
never from a command line, and never shows in a ``repr`` or a log line.

>>> KafkaSecurity(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="router",
...               sasl_password="s3cret")
KafkaSecurity(protocol='SASL_SSL', sasl_mechanism='SCRAM-SHA-512', sasl_username='router', sasl_password_file=None, sasl_oauth_token_provider='', ssl_ca_file=None, ssl_cert_file=None, ssl_key_file=None)
>>> KafkaSecurity(protocol="SASL_SSL")
Traceback (most recent call last):
...
headroom.contract.settings.SettingsError: HEADROOM_KAFKA_SECURITY_PROTOCOL=SASL_SSL needs HEADROOM_KAFKA_SASL_MECHANISM (one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from headroom.contract.settings import SettingsError, setting

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

TokenProvider = Callable[[], tuple[str, float]]  # () -> (token, expiry in unix seconds)


@dataclass(frozen=True)
class KafkaSecurity:
    """Authentication and encryption of every Kafka client (default: PLAINTEXT, for a local broker)."""

    protocol: str = setting("PLAINTEXT", "HEADROOM_KAFKA_SECURITY_PROTOCOL",
                            "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.")
    sasl_mechanism: str = setting("", "HEADROOM_KAFKA_SASL_MECHANISM",
                                  "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (SASL protocols).")
    sasl_username: str = setting("", "HEADROOM_KAFKA_SASL_USERNAME", "SASL user name (PLAIN, SCRAM).")
    sasl_password_file: Path | None = setting(None, "HEADROOM_KAFKA_SASL_PASSWORD_FILE",
                                              "File holding the SASL password (a mounted Secret).")
    sasl_password: str = setting("", "HEADROOM_KAFKA_SASL_PASSWORD",
                                 "The SASL password itself, for setups with no files.", secret=True)
    sasl_oauth_token_provider: str = setting("", "HEADROOM_KAFKA_SASL_OAUTH_TOKEN_PROVIDER",
                                             "module:callable returning (token, expiry unix s) (OAUTHBEARER).")
    ssl_ca_file: Path | None = setting(None, "HEADROOM_KAFKA_SSL_CA_FILE",
                                       "CA bundle (PEM) the brokers' certificates are checked against.")
    ssl_cert_file: Path | None = setting(None, "HEADROOM_KAFKA_SSL_CERT_FILE",
                                         "Client certificate (PEM), for brokers that authenticate by certificate.")
    ssl_key_file: Path | None = setting(None, "HEADROOM_KAFKA_SSL_KEY_FILE", "Private key (PEM) of the client certificate.")

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise SettingsError(f"HEADROOM_KAFKA_SECURITY_PROTOCOL={self.protocol}: expected one of {', '.join(PROTOCOLS)}")
        if self.uses_sasl:
            self._check_sasl()
        elif self.sasl_mechanism:
            raise SettingsError(f"HEADROOM_KAFKA_SASL_MECHANISM={self.sasl_mechanism} needs a SASL protocol "
                                f"(HEADROOM_KAFKA_SECURITY_PROTOCOL is {self.protocol})")
        tls_files = [name for name, path in (("HEADROOM_KAFKA_SSL_CA_FILE", self.ssl_ca_file),
                                             ("HEADROOM_KAFKA_SSL_CERT_FILE", self.ssl_cert_file),
                                             ("HEADROOM_KAFKA_SSL_KEY_FILE", self.ssl_key_file)) if path]
        if tls_files and not self.uses_ssl:
            raise SettingsError(f"{tls_files[0]} is set but HEADROOM_KAFKA_SECURITY_PROTOCOL={self.protocol} does "
                                "not use TLS (SSL or SASL_SSL)")
        if (self.ssl_cert_file is None) != (self.ssl_key_file is None):
            raise SettingsError("HEADROOM_KAFKA_SSL_CERT_FILE and HEADROOM_KAFKA_SSL_KEY_FILE go together")

    def _check_sasl(self) -> None:
        if self.sasl_mechanism not in MECHANISMS:
            raise SettingsError(f"HEADROOM_KAFKA_SECURITY_PROTOCOL={self.protocol} needs HEADROOM_KAFKA_SASL_MECHANISM "
                                f"(one of {', '.join(MECHANISMS)})" if not self.sasl_mechanism else
                                f"HEADROOM_KAFKA_SASL_MECHANISM={self.sasl_mechanism}: expected one of "
                                f"{', '.join(MECHANISMS)}")
        if self.sasl_mechanism == "OAUTHBEARER":
            if not self.sasl_oauth_token_provider:
                raise SettingsError("HEADROOM_KAFKA_SASL_MECHANISM=OAUTHBEARER needs "
                                    "HEADROOM_KAFKA_SASL_OAUTH_TOKEN_PROVIDER (module:callable)")
            return
        if not self.sasl_username:
            raise SettingsError(f"HEADROOM_KAFKA_SASL_MECHANISM={self.sasl_mechanism} needs HEADROOM_KAFKA_SASL_USERNAME")
        if (self.sasl_password_file is None) == (not self.sasl_password):
            raise SettingsError(f"HEADROOM_KAFKA_SASL_MECHANISM={self.sasl_mechanism} needs exactly one of "
                                "HEADROOM_KAFKA_SASL_PASSWORD_FILE and HEADROOM_KAFKA_SASL_PASSWORD")

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_ssl(self) -> bool:
        return self.protocol.endswith("SSL")

    def password(self) -> str:
        """The SASL password: the file's content without its final line break, or the environment's value."""
        if self.sasl_password_file is None:
            return self.sasl_password
        try:
            return self.sasl_password_file.read_text().rstrip("\r\n")
        except OSError as err:
            raise SettingsError(f"HEADROOM_KAFKA_SASL_PASSWORD_FILE={self.sasl_password_file}: cannot read it "
                                f"({err.strerror})") from err

    def token_provider(self) -> TokenProvider:
        """The OAUTHBEARER token provider named by ``module:callable``."""
        module_name, _, name = self.sasl_oauth_token_provider.partition(":")
        try:
            provider = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError, ValueError) as err:
            raise SettingsError(f"HEADROOM_KAFKA_SASL_OAUTH_TOKEN_PROVIDER={self.sasl_oauth_token_provider}: "
                                f"cannot load it ({err})") from err
        if not callable(provider):
            raise SettingsError(f"HEADROOM_KAFKA_SASL_OAUTH_TOKEN_PROVIDER={self.sasl_oauth_token_provider} is "
                                "not callable")
        token_provider: TokenProvider = provider
        return token_provider
