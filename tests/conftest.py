"""Session fixtures shared by every test package.

``ext_proc_front`` runs a test with either ext_proc front. ``kafka`` starts a real Kafka broker (KRaft, loopback, free ports, a temporary state folder) once per test
session, creates the declared topics, yields their :class:`~contract.topics.KafkaSettings`, and stops the
broker afterwards — also when tests fail. Set ``HEADROOM_TEST_KAFKA_BOOTSTRAP`` to use a broker that is
already running instead. ``secure_kafka`` is the same broker in secure mode (TLS, users, ACLs), started once
per session by the tests that need it. ``pki`` is a private CA with server and client certificates, and a
client certificate from another CA, for tests of TLS and mTLS.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from headroom import kafka_topics
from headroom.certificates import CertificateAuthority
from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings, TopicSpec
from headroom.localkafka import broker, security
from headroom.localkafka.cli import start
from headroom.localkafka.settings import BrokerSettings
from headroom.ports import free_port

pytest_plugins = ["tests.kube"]  # the helm and kube_api fixtures


@pytest.fixture(params=["native", "grpcio"])
def ext_proc_front(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs twice: with the compiled ext_proc front and with the grpcio servicer, the reference (the
    routers of ``tests.router.routercases.router_config`` serve it; a test starting its own passes it on)."""
    from tests.router import routercases
    monkeypatch.setitem(routercases.ROUTER_SETTINGS, "extProcFront", request.param)
    return str(request.param)


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSettings]:
    existing = os.environ.get("HEADROOM_TEST_KAFKA_BOOTSTRAP")
    if existing:
        settings = from_env(KafkaSettings, {}, bootstrap_servers=existing)
        kafka_topics.ensure_topics(settings)
        yield settings
        return
    broker_settings = from_env(BrokerSettings, port=free_port(), controller_port=free_port(),
                               state_dir=tmp_path_factory.mktemp("kafka-state"))
    broker.up(broker_settings)
    try:
        settings = from_env(KafkaSettings, {}, bootstrap_servers=broker_settings.bootstrap)
        kafka_topics.ensure_topics(settings)
        yield settings
    finally:
        broker.down(broker_settings)


@dataclass(frozen=True)
class SecureBroker:
    """The session's secure broker: its settings, and how each user reaches it."""

    settings: BrokerSettings
    worker_app_id: str

    def client(self, user: str, mechanism: str = "SCRAM-SHA-512") -> KafkaSettings:
        """``user``: ``admin`` or a component's (``headroom-router``, ...; localkafka.security.users)."""
        return security.client(self.settings, user, mechanism, base=from_env(KafkaSettings, {}))

    def environ(self, user: str) -> dict[str, str]:
        """The ``HEADROOM_KAFKA_*`` variables of ``user``, as a component's process reads them."""
        lines = security.layout(self.settings).env_file(user).read_text().splitlines()
        return dict(line.split("=", 1) for line in lines if line)


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    """A broker in secure mode (``headroom kafka up --secure``) with the declared topics and every
    component's ACLs, the worker's for the app id ``headroom-secure-tests``; started once per session."""
    settings = from_env(BrokerSettings, secure=True, port=free_port(), controller_port=free_port(),
                        ssl_port=free_port(), state_dir=tmp_path_factory.mktemp("secure-kafka-state"))
    try:
        start(settings, worker_app_id="headroom-secure-tests")
        yield SecureBroker(settings, "headroom-secure-tests")
    finally:
        broker.down(settings)


@pytest.fixture
def fresh_topic(kafka: KafkaSettings):
    """A factory of new, uniquely named topics on the test broker: ``fresh_topic(prefix, partitions, config)``."""
    def make(prefix: str = "test", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        kafka_topics.ensure_topics(kafka, [TopicSpec(name, partitions, config or {})])
        return name
    return make


@pytest.fixture
def pipeline_kafka(kafka: KafkaSettings) -> KafkaSettings:
    """The test broker with this test's own telemetry, dead-letter and model topics (4 telemetry partitions)."""
    tag = uuid.uuid4().hex[:8]
    settings = dataclasses.replace(kafka, telemetry_topic=f"telemetry-{tag}", dlq_topic=f"telemetry-dlq-{tag}",
                                   model_topic=f"model-updates-{tag}", telemetry_partitions=4)
    kafka_topics.ensure_topics(settings)
    return settings


@dataclass(frozen=True)
class Pki:
    """Files of a private CA: its certificate, a server's (127.0.0.1, localhost) and a client's pair, and a
    client pair from another CA."""

    ca: Path
    server: tuple[Path, Path]
    client: tuple[Path, Path]
    stranger: tuple[Path, Path]


@pytest.fixture(scope="session")
def trusted_keys(tmp_path_factory: pytest.TempPathFactory) -> str:
    """HEADROOM_MODEL_TRUSTED_KEYS of a reader that trusts the tests' signing key (tests.keys.TEST_KEY)."""
    from tests.keys import write_public_key

    return str(write_public_key(tmp_path_factory.mktemp("trusted-keys")))


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority.create("headroom tests CA")
    ca.write(folder)
    other = CertificateAuthority.create("another CA")
    return Pki(ca=folder / "ca.pem", server=ca.issue("server", ("127.0.0.1", "localhost")).write(folder, "server"),
               client=ca.issue("client").write(folder, "client"),
               stranger=other.issue("client").write(folder, "stranger"))
