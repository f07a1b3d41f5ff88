"""The local broker in secure mode: who gets in, with which mechanism and library, and what each principal may do.

One broker for the session (the ``secure_kafka`` fixture); clients are confluent-kafka's (librdkafka) and
aiokafka's as Faust's worker makes them (``credentials_to_aiokafka_auth`` over our Faust credentials).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import OFFSET_BEGINNING, KafkaException, TopicPartition
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

from headroom import kafka_clients
from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.kafka_security import KafkaSecurity
from headroom.contract.model_update import make_update
from headroom.contract.telemetry import encode
from headroom.contract.topics import KafkaSettings
from headroom.kafka_auth import faust_credentials
from headroom.localkafka import security
from headroom.localkafka.selftest import synthetic_records
from headroom.model_topic import GROUP_PREFIX, read_all
from headroom.trainer.publish import ModelPublisher, PublishError
from tests.keys import TEST_KEY, TRUST
from tests.localkafka import oauth

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]
QUIET = logging.getLogger("tests.librdkafka")  # librdkafka's retries of refused connections go here, not stderr


def record_bytes() -> bytes:
    (record,) = synthetic_records(1, 1, seed=uuid.uuid4().int % 1000)
    return encode(record)


def librdkafka_produce(kafka: KafkaSettings, topic: str, timeout_s: float = 15.0) -> object:
    """Produce one record; returns None when delivered, else the error."""
    outcome: list[object] = []
    producer = kafka_clients.producer(kafka, {"logger": QUIET, "message.timeout.ms": int(timeout_s * 1000)})
    producer.produce(topic, key=b"pool-a", value=record_bytes(), on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(timeout_s + 5)
    return outcome[0] if outcome else "not delivered"


def aiokafka_produce(kafka: KafkaSettings, topic: str) -> None:
    async def send() -> None:
        auth = credentials_to_aiokafka_auth(faust_credentials(kafka.security))
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap_servers, request_timeout_ms=15000, **auth)
        await producer.start()
        try:
            await producer.send_and_wait(topic, record_bytes(), key=b"pool-a")
        finally:
            await producer.stop()
    asyncio.run(asyncio.wait_for(send(), 60))


def refused(kafka: KafkaSettings) -> bool:
    try:
        kafka_clients.admin(kafka, {"logger": QUIET}).list_topics(timeout=4)
    except KafkaException:
        return True
    return False


def test_clients_without_valid_credentials_are_refused(secure_kafka):
    router = secure_kafka.client("headroom-router")
    tls_only = KafkaSecurity(protocol="SSL", ssl_ca_file=router.security.ssl_ca_file)
    assert not refused(router)
    assert refused(dataclasses.replace(router, security=KafkaSecurity()))  # plaintext
    assert refused(dataclasses.replace(router, security=tls_only))  # TLS, no SASL
    assert refused(dataclasses.replace(router, security=dataclasses.replace(
        router.security, sasl_password_file=None, sasl_password="guessed")))
    assert refused(dataclasses.replace(router, security=dataclasses.replace(
        router.security, ssl_ca_file=secure_kafka.settings.state_dir / "no-such-ca.pem")))  # broker unverifiable
    certificate_listener = secure_kafka.client("headroom-router", "SSL")
    assert not refused(certificate_listener)
    assert refused(dataclasses.replace(certificate_listener, security=tls_only))  # no client certificate


def oauth_client(secure_kafka) -> KafkaSettings:
    oauth.BROKER = secure_kafka.settings
    ca = security.layout(secure_kafka.settings).ca
    return dataclasses.replace(secure_kafka.client("headroom-router"), security=KafkaSecurity(
        protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider="tests.localkafka.oauth:token",
        ssl_ca_file=ca))


@pytest.mark.parametrize("library", ["librdkafka", "aiokafka"])
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER", "SSL"])
def test_every_mechanism_works_in_both_client_libraries(secure_kafka, mechanism, library):
    kafka = oauth_client(secure_kafka) if mechanism == "OAUTHBEARER" else secure_kafka.client("headroom-router", mechanism)
    issued = oauth.issued
    if library == "librdkafka":
        assert librdkafka_produce(kafka, kafka.telemetry_topic) is None
    else:
        aiokafka_produce(kafka, kafka.telemetry_topic)
    assert (oauth.issued > issued) == (mechanism == "OAUTHBEARER")


@pytest.mark.parametrize("user, topic, allowed", [
    ("headroom-router", "telemetry", True),
    ("headroom-router", "model-updates", False),
    ("headroom-router", "telemetry-dlq", False),
    ("headroom-predictor", "telemetry", False),
    ("headroom-predictor", "model-updates", False),
    ("headroom-ops", "telemetry", False),
    ("headroom-worker", "telemetry-dlq", True),
    ("headroom-worker", "telemetry", False),
])
def test_who_may_write_where(secure_kafka, user, topic, allowed):
    error = librdkafka_produce(secure_kafka.client(user), topic)
    if allowed:
        assert error is None
    else:
        assert "TOPIC_AUTHORIZATION_FAILED" in str(error), error


def test_a_router_cannot_publish_a_model_and_the_worker_can(secure_kafka):
    update = make_update(model=b'{"learner": {}}', version=1, pool_key="acl-test", target="ttft", objective="mean",
                         feature_schema=FEATURE_SCHEMA, model_format="json", created_at=1.7e9)
    with pytest.raises(PublishError, match="Topic authorization failed"):
        ModelPublisher(secure_kafka.client("headroom-router"), TEST_KEY, timeout_s=15).publish(update)
    ModelPublisher(secure_kafka.client("headroom-worker"), TEST_KEY).publish(update)
    for user in ("headroom-predictor", "headroom-router", "headroom-ops"):
        keys = {item.update.key for item in read_all(secure_kafka.client(user), TRUST, timeout_s=30) if item.update}
        assert "acl-test/ttft/mean" in keys, user


def test_who_may_read_telemetry(secure_kafka):
    assert librdkafka_produce(secure_kafka.client("headroom-router"), "telemetry") is None

    def reads(user: str) -> bool:
        """A reader of ``user`` (in the groups its component uses) gets a record, or an authorization error."""
        group = {"headroom-worker": secure_kafka.worker_app_id, "headroom-ops": "headroom-replay"}.get(
            user, GROUP_PREFIX)
        consumer = kafka_clients.consumer(secure_kafka.client(user), group, {"logger": QUIET})
        try:
            metadata = consumer.list_topics("telemetry", timeout=10).topics["telemetry"]
            if metadata.error is not None:  # not even allowed to see it
                assert "TOPIC_AUTHORIZATION_FAILED" in str(metadata.error), metadata.error
                return False
            consumer.assign([TopicPartition("telemetry", p, OFFSET_BEGINNING) for p in metadata.partitions])
            for _ in range(40):
                polled = consumer.poll(0.5)
                if polled is not None and polled.error() is None:
                    return True
                if polled is not None:
                    assert "TOPIC_AUTHORIZATION_FAILED" in str(polled.error()), polled.error()
                    return False
            raise AssertionError(f"{user}: neither a record nor an error from the telemetry topic")
        finally:
            consumer.close()
    assert {user: reads(user) for user in security.users()} == {
        "admin": True, "headroom-worker": True, "headroom-router": False, "headroom-predictor": False,
        "headroom-ops": True, "headroom-llmd-training": False}
