"""headroom.kafka_auth: one KafkaSecurity, in librdkafka's and Faust's (aiokafka's) terms."""

import ssl

import pytest
from faust.auth import OAuthCredentials, SASLCredentials, SSLCredentials
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from headroom.contract.kafka_security import KafkaSecurity
from headroom.kafka_auth import cached, faust_credentials, librdkafka_options


def token() -> tuple[str, float]:
    return "a.b.c", 4_000_000_000.0


def test_plaintext_adds_nothing():
    assert librdkafka_options(KafkaSecurity()) == {"security.protocol": "PLAINTEXT"}
    assert faust_credentials(KafkaSecurity()) is None


def test_scram_over_tls_with_a_password_file(tmp_path, pki):
    (tmp_path / "password").write_text("s3cret\n")
    security = KafkaSecurity(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", sasl_username="worker",
                             sasl_password_file=tmp_path / "password", ssl_ca_file=pki.ca)
    assert librdkafka_options(security) == {
        "security.protocol": "SASL_SSL", "ssl.ca.location": str(pki.ca), "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "worker", "sasl.password": "s3cret"}
    credentials = faust_credentials(security)
    assert isinstance(credentials, SASLCredentials)
    aiokafka = credentials_to_aiokafka_auth(credentials)
    assert (aiokafka["security_protocol"], aiokafka["sasl_mechanism"], aiokafka["sasl_plain_username"],
            aiokafka["sasl_plain_password"]) == ("SASL_SSL", "SCRAM-SHA-512", "worker", "s3cret")
    assert aiokafka["ssl_context"].verify_mode == ssl.CERT_REQUIRED and aiokafka["ssl_context"].check_hostname


def test_sasl_without_tls_stays_plaintext():
    security = KafkaSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u", sasl_password="p")
    assert credentials_to_aiokafka_auth(faust_credentials(security))["security_protocol"] == "SASL_PLAINTEXT"


def test_a_client_certificate(pki):
    security = KafkaSecurity(protocol="SSL", ssl_ca_file=pki.ca, ssl_cert_file=pki.client[0], ssl_key_file=pki.client[1])
    assert librdkafka_options(security) == {
        "security.protocol": "SSL", "ssl.ca.location": str(pki.ca), "ssl.certificate.location": str(pki.client[0]),
        "ssl.key.location": str(pki.client[1])}
    assert isinstance(faust_credentials(security), SSLCredentials)


def test_oauthbearer_calls_the_provider_for_both_libraries():
    security = KafkaSecurity(protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER",
                             sasl_oauth_token_provider="tests.headroom.test_kafka_auth:token")
    options = librdkafka_options(security)
    assert options["sasl.mechanism"] == "OAUTHBEARER" and "sasl.password" not in options
    assert options["oauth_cb"]("") == ("a.b.c", 4_000_000_000.0, "headroom", {})
    credentials = faust_credentials(security)
    assert isinstance(credentials, OAuthCredentials)
    import asyncio
    assert asyncio.run(credentials.oauth_cb.token()) == "a.b.c"


@pytest.mark.parametrize("expires_in, calls", [(3600.0, 1), (30.0, 3)], ids=["reused", "renewed-near-expiry"])
def test_tokens_are_reused_until_a_minute_before_they_expire(expires_in, calls):
    import time
    asked = []

    def provider():
        asked.append(1)
        return f"t{len(asked)}", time.time() + expires_in
    tokens = cached(provider)
    for _ in range(3):
        tokens()
    assert len(asked) == calls
