"""contract.kafka_security: the one description of how Kafka clients authenticate, read from the environment."""

import pytest

from headroom.contract.kafka_security import KafkaSecurity
from headroom.contract.settings import SettingsError, describe, from_env
from headroom.contract.topics import KafkaSettings


def test_the_environment_reaches_the_nested_security_settings(tmp_path):
    (tmp_path / "password").write_text("s3cret\n")
    kafka = from_env(KafkaSettings, {"HEADROOM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                                     "HEADROOM_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
                                     "HEADROOM_KAFKA_SASL_USERNAME": "worker",
                                     "HEADROOM_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "password"),
                                     "HEADROOM_KAFKA_SSL_CA_FILE": str(tmp_path / "ca.pem")})
    assert kafka.security.password() == "s3cret"
    assert kafka.security.ssl_ca_file == tmp_path / "ca.pem" and kafka.security.ssl_cert_file is None
    assert {env for _, env, _, _ in describe(KafkaSettings)} >= {
        "HEADROOM_KAFKA_SECURITY_PROTOCOL", "HEADROOM_KAFKA_SASL_MECHANISM", "HEADROOM_KAFKA_SASL_USERNAME",
        "HEADROOM_KAFKA_SASL_PASSWORD_FILE", "HEADROOM_KAFKA_SASL_PASSWORD", "HEADROOM_KAFKA_SASL_OAUTH_TOKEN_PROVIDER",
        "HEADROOM_KAFKA_SSL_CA_FILE", "HEADROOM_KAFKA_SSL_CERT_FILE", "HEADROOM_KAFKA_SSL_KEY_FILE"}


def test_a_password_never_shows():
    security = KafkaSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", sasl_username="u",
                             sasl_password="hunter2")
    assert "hunter2" not in repr(security) and "hunter2" not in repr(KafkaSettings(security=security))


@pytest.mark.parametrize("fields, message", [
    ({"protocol": "TLS"}, "expected one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"protocol": "SASL_SSL"}, "needs HEADROOM_KAFKA_SASL_MECHANISM"),
    ({"protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"}, "HEADROOM_KAFKA_SASL_MECHANISM=GSSAPI"),
    ({"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_password": "p"}, "needs HEADROOM_KAFKA_SASL_USERNAME"),
    ({"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "sasl_username": "u"}, "exactly one of"),
    ({"protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}, "needs HEADROOM_KAFKA_SASL_OAUTH_TOKEN_PROVIDER"),
    ({"sasl_mechanism": "PLAIN"}, "needs a SASL protocol"),
    ({"ssl_ca_file": "ca.pem"}, "does not use TLS"),
    ({"protocol": "SSL", "ssl_cert_file": "c.pem"}, "go together"),
], ids=["protocol", "no-mechanism", "mechanism", "no-user", "no-password", "no-provider", "mechanism-no-sasl",
        "tls-file-plaintext", "cert-without-key"])
def test_a_setup_that_would_not_work_is_refused_naming_the_variable(fields, message):
    with pytest.raises(SettingsError, match=message):
        KafkaSecurity(**fields)


def test_a_secret_does_not_show_in_a_parse_error():
    with pytest.raises(SettingsError) as error:
        from_env(KafkaSettings, {"HEADROOM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "HEADROOM_KAFKA_SASL_MECHANISM": "PLAIN",
                                 "HEADROOM_KAFKA_SASL_USERNAME": "u", "HEADROOM_KAFKA_SASL_PASSWORD": "hunter2",
                                 "HEADROOM_KAFKA_SASL_PASSWORD_FILE": "/p"})
    assert "hunter2" not in str(error.value)


def test_an_unreadable_password_file_or_provider_is_named(tmp_path):
    security = KafkaSecurity(protocol="SASL_SSL", sasl_mechanism="PLAIN", sasl_username="u",
                             sasl_password_file=tmp_path / "missing")
    with pytest.raises(SettingsError, match="HEADROOM_KAFKA_SASL_PASSWORD_FILE=.*missing: cannot read it"):
        security.password()
    oauth = KafkaSecurity(protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider="no.such:thing")
    with pytest.raises(SettingsError, match="HEADROOM_KAFKA_SASL_OAUTH_TOKEN_PROVIDER=no.such:thing: cannot load it"):
        oauth.token_provider()
