"""The client security of :class:`~contract.kafka_security.KafkaSecurity` in each Kafka library's terms, made
here and nowhere else: librdkafka options for every confluent-kafka client (:func:`librdkafka_options`, laid
into every config by :mod:`headroom.kafka_clients`) and Faust's broker credentials for the worker's own
aiokafka clients (:func:`faust_credentials`).

Passwords are read from their file when a client is made, so a rotated Secret is picked up by the next
client. An OAUTHBEARER token provider is called by librdkafka (``oauth_cb``) and by aiokafka (a token
provider object) whenever they need a fresh token.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import time
from typing import TYPE_CHECKING, Any

from headroom.contract.kafka_security import KafkaSecurity, TokenProvider

if TYPE_CHECKING:
    from faust.types.auth import CredentialsT


def librdkafka_options(security: KafkaSecurity) -> dict[str, Any]:
    """The librdkafka options of ``security`` (nothing beyond the protocol for PLAINTEXT)."""
    options: dict[str, Any] = {"security.protocol": security.protocol}
    if security.uses_ssl:
        if security.ssl_ca_file is not None:
            options["ssl.ca.location"] = str(security.ssl_ca_file)
        if security.ssl_cert_file is not None and security.ssl_key_file is not None:
            options["ssl.certificate.location"] = str(security.ssl_cert_file)
            options["ssl.key.location"] = str(security.ssl_key_file)
    if security.uses_sasl:
        options["sasl.mechanism"] = security.sasl_mechanism
        if security.sasl_mechanism == "OAUTHBEARER":
            provider = cached(security.token_provider())
            principal = security.sasl_username or "headroom"
            options["oauth_cb"] = lambda _config: (*provider(), principal, {})
        else:
            options["sasl.username"] = security.sasl_username
            options["sasl.password"] = security.password()
    return options


def ssl_context(security: KafkaSecurity) -> ssl.SSLContext:
    """A TLS client context that checks the brokers against the CA bundle (the system's when none is given)
    and presents the client certificate when there is one."""
    context = ssl.create_default_context(cafile=str(security.ssl_ca_file) if security.ssl_ca_file else None)
    if security.ssl_cert_file is not None and security.ssl_key_file is not None:
        context.load_cert_chain(str(security.ssl_cert_file), str(security.ssl_key_file))
    return context


def faust_credentials(security: KafkaSecurity) -> CredentialsT | None:
    """Faust's ``broker_credentials`` for ``security``; None for PLAINTEXT."""
    from faust.auth import OAuthCredentials, SASLCredentials, SSLCredentials

    context = ssl_context(security) if security.uses_ssl else None
    if not security.uses_sasl:
        return SSLCredentials(context) if context is not None else None
    if security.sasl_mechanism == "OAUTHBEARER":
        return OAuthCredentials(oauth_cb=_aiokafka_token_provider(cached(security.token_provider())),
                                ssl_context=context)
    return SASLCredentials(username=security.sasl_username, password=security.password(), ssl_context=context,
                           mechanism=security.sasl_mechanism)


def cached(provider: TokenProvider, margin_s: float = 60.0) -> TokenProvider:
    """``provider``, asked again only when its last token is within ``margin_s`` of expiring."""
    lock = threading.Lock()
    held: list[tuple[str, float]] = []

    def token() -> tuple[str, float]:
        with lock:
            if not held or held[0][1] - margin_s <= time.time():
                held[:] = [provider()]
            return held[0]

    return token


def _aiokafka_token_provider(provider: TokenProvider) -> Any:
    """aiokafka's token provider over ``provider``, called off the event loop (it may do network I/O)."""
    from aiokafka.abc import AbstractTokenProvider

    class Provider(AbstractTokenProvider):  # type: ignore[misc]  # an untyped base
        async def token(self) -> str:
            token, _expiry = await asyncio.to_thread(provider)
            return token

    return Provider()
