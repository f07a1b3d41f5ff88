"""One llm-d training API server: the HTTP API (:mod:`llmd.training_api`, over TLS when given a certificate:
:class:`~contract.tls.ServerTls`; with bearer tokens when given a token file), its bounded intake
(:class:`~llmd.intake.Intake`), the telemetry producer and the producer of dead letters and requests to
forget behind it (with the Kafka security settings of every client, :mod:`headroom.kafka_clients`), the
model shelf beside it, and, when asked for, a plain health port (``/healthz``, ``/readyz``, ``/metrics``) for
probes that reach the pod's address while the API listens on loopback. Explicit :meth:`TrainingServer.start`,
:meth:`~TrainingServer.wait` and a graceful :meth:`~TrainingServer.stop` (calls in flight finish, buffered
records are delivered within the grace period); :func:`serve` runs one until SIGTERM or SIGINT
(``headroom llmd training-server``).
"""

from __future__ import annotations

import logging
import threading

from aiohttp import web
from confluent_kafka import KafkaError, Message

from headroom.contract import window_forget
from headroom.contract.topics import REASON_HEADER, SOURCE_HEADER, KafkaSettings
from headroom.contract.window_forget import Forget
from headroom.http_thread import HttpThread
from headroom.kafka_clients import producer
from headroom.llmd.intake import Intake
from headroom.llmd.model_shelf import ModelShelf
from headroom.llmd.settings import TrainingApiSettings
from headroom.llmd.training_api import TrainingApi
from headroom.router.control.telemetry_sink import KafkaTelemetry
from headroom.router.fronts.auth import BearerTokens
from headroom.threads import serve_until_signal
from headroom.tls import ssl_server_context

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often delivery reports are served


class KafkaNotices:
    """Dead letters (to the dead-letter topic, with the reason and where they came from in headers) and
    requests to forget (to the telemetry topic), from one idempotent producer."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self.topic, self.telemetry_topic = kafka.dlq_topic, kafka.telemetry_topic
        self.failed = 0
        self._producer = producer(kafka, {"client.id": "headroom-llmd-training", "enable.idempotence": True,
                                          "linger.ms": 5, "message.timeout.ms": 0, "logger": log})

    def send(self, key: bytes, value: bytes, reason: str, source: str) -> None:
        self._producer.produce(self.topic, key=key, value=value, on_delivery=self._on_delivery,
                               headers=[(REASON_HEADER, reason.encode()), (SOURCE_HEADER, source.encode())])
        self._producer.poll(0)

    def forget(self, forget: Forget) -> None:
        self._producer.produce(self.telemetry_topic, key=window_forget.key(forget), value=window_forget.encode(forget),
                               on_delivery=self._on_delivery)

    def poll(self) -> None:
        self._producer.poll(0)

    def flush(self, timeout_s: float) -> int:
        return self._producer.flush(timeout_s)

    def _on_delivery(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            self.failed += 1
            log.warning("message not delivered: %s", err)


class TrainingServer:
    def __init__(self, settings: TrainingApiSettings, kafka: KafkaSettings) -> None:
        self.settings = settings
        self.telemetry = KafkaTelemetry(kafka, buffer_records=settings.buffer_records,
                                        client_id="headroom-llmd-training")
        self.notices = KafkaNotices(kafka)
        self.shelf = ModelShelf(kafka, settings.signing.trust())
        self.intake = Intake(settings.max_pending_samples, settings.buffer_records, lambda: self.telemetry.buffered)
        tokens = BearerTokens.load(settings.auth_tokens_file) if settings.auth_tokens_file else None
        self.api = TrainingApi(self.telemetry, self.notices, self.shelf, pool_key=settings.pool_key,
                               objective=settings.objective, times=settings.times,
                               transit_s=settings.sample_transit_s, intake=self.intake, tokens=tokens,
                               forget=self._forget, deliveries=self.deliveries)
        self.port: int | None = None
        self.health_port: int | None = None
        self._http = HttpThread(self.api.app(), settings.host, settings.port, "llmd-training",
                                grace=settings.grace_seconds, ssl_context=ssl_server_context(settings.tls))
        self._health: HttpThread | None = None
        if settings.health_port >= 0:
            health = web.Application()
            health.add_routes(self.api.health_routes())
            self._health = HttpThread(health, settings.health_host, settings.health_port, "llmd-training-health")
        self._stopped = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="llmd-training-poll", daemon=True)

    def start(self) -> TrainingServer:
        self.shelf.start()
        try:
            self.port = self._http.start()
            if self._health is not None:
                self.health_port = self._health.start()
        except OSError as err:
            self._http.stop()
            self.shelf.stop()
            raise OSError(f"cannot bind llm-d's training API on {self.settings.host}:{self.settings.port} "
                          f"(HEADROOM_LLMD_TRAINING_HOST, _PORT) or its health port {self.settings.health_host}:"
                          f"{self.settings.health_port} (_HEALTH_HOST, _HEALTH_PORT): {err}") from err
        self._poller.start()
        log.info("llm-d training API on %s:%d (%s, tokens %s; health port %s), pool key %r", self.settings.host,
                 self.port, "TLS" if self.settings.tls.enabled else "plaintext",
                 "required" if self.api.tokens else "off", self.health_port, self.settings.pool_key)
        return self

    def wait(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._http.stop()
        if self._health is not None:
            self._health.stop()
        self.intake.close()
        left = self.telemetry.flush(self.settings.grace_seconds) + self.notices.flush(self.settings.grace_seconds)
        if left:
            log.warning("%d records not delivered before stopping", left)
        self.shelf.stop()
        self._stopped.set()

    def deliveries(self) -> dict[str, int]:
        """Records delivered, failed after buffering, dropped on a full buffer; dead letters that failed."""
        counts = self.telemetry.counts
        return {"delivered": counts.delivered, "failed": counts.failed, "dropped": counts.dropped,
                "dead_letters_failed": self.notices.failed}

    def _forget(self, forgets: list[Forget]) -> int:
        """Send ``forgets`` once every sample sent before has reached the broker (so they land after them);
        returns how many were left unsent or unacknowledged within the grace period."""
        if self.telemetry.flush(self.settings.grace_seconds):
            return len(forgets)
        for forget in forgets:
            self.notices.forget(forget)
        return min(len(forgets), self.notices.flush(self.settings.grace_seconds))

    def _poll(self) -> None:
        while not self._stopped.wait(POLL_S):
            self.telemetry.poll()
            self.notices.poll()


def serve(settings: TrainingApiSettings, kafka: KafkaSettings) -> int:
    """Run one server until SIGTERM or SIGINT, then stop gracefully."""
    return serve_until_signal(TrainingServer(settings, kafka).start(), "llmd-training")
