"""One llm-d training API server: the HTTP API (:mod:`llmd.training_api`, over TLS when given a certificate:
:class:`~contract.tls.ServerTls`), the telemetry and dead-letter producers behind it (with the Kafka security
settings of every client, :mod:`headroom.kafka_clients`) and the model shelf beside it. Explicit
:meth:`TrainingServer.start`, :meth:`~TrainingServer.wait` and a graceful :meth:`~TrainingServer.stop` (calls
in flight finish, buffered records are delivered within the grace period); :func:`serve` runs one until
SIGTERM or SIGINT (``headroom llmd training-server``).
"""

from __future__ import annotations

import logging
import threading

from headroom.contract.topics import REASON_HEADER, SOURCE_HEADER, KafkaSettings
from headroom.http_thread import HttpThread
from headroom.kafka_clients import producer
from headroom.llmd.model_shelf import ModelShelf
from headroom.llmd.settings import TrainingApiSettings
from headroom.llmd.training_api import TrainingApi
from headroom.router.telemetry_sink import KafkaTelemetry
from headroom.threads import serve_until_signal
from headroom.tls import ssl_server_context

log = logging.getLogger(__name__)

POLL_S = 0.1  # how often delivery reports are served


class KafkaDeadLetters:
    """Rejected samples to the dead-letter topic, with the reason and where they came from in headers."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self.topic = kafka.dlq_topic
        self.failed = 0
        self._producer = producer(kafka, {"client.id": "headroom-llmd-training", "enable.idempotence": True,
                                          "linger.ms": 5, "message.timeout.ms": 0, "logger": log})

    def send(self, key: bytes, value: bytes, reason: str, source: str) -> None:
        self._producer.produce(self.topic, key=key, value=value, on_delivery=self._on_delivery,
                               headers=[(REASON_HEADER, reason.encode()), (SOURCE_HEADER, source.encode())])
        self._producer.poll(0)

    def poll(self) -> None:
        self._producer.poll(0)

    def flush(self, timeout_s: float) -> int:
        return self._producer.flush(timeout_s)

    def _on_delivery(self, err, _msg) -> None:
        if err is not None:
            self.failed += 1
            log.warning("dead letter not delivered to %s: %s", self.topic, err)


class TrainingServer:
    def __init__(self, settings: TrainingApiSettings, kafka: KafkaSettings) -> None:
        self.settings = settings
        self.telemetry = KafkaTelemetry(kafka, buffer_records=settings.buffer_records,
                                        client_id="headroom-llmd-training")
        self.dead_letters = KafkaDeadLetters(kafka)
        self.shelf = ModelShelf(kafka, settings.signing.trust())
        self.api = TrainingApi(self.telemetry, self.dead_letters, self.shelf, pool_key=settings.pool_key,
                               objective=settings.objective, deliveries=self.deliveries)
        self.port: int | None = None
        self._http = HttpThread(self.api.app(), settings.host, settings.port, "llmd-training",
                                grace=settings.grace_seconds, ssl_context=ssl_server_context(settings.tls))
        self._stopped = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="llmd-training-poll", daemon=True)

    def start(self) -> TrainingServer:
        self.shelf.start()
        try:
            self.port = self._http.start()
        except OSError as err:
            self.shelf.stop()
            raise OSError(f"cannot bind llm-d's training API on {self.settings.host}:{self.settings.port} "
                          f"(HEADROOM_LLMD_TRAINING_PORT): {err}") from err
        self._poller.start()
        log.info("llm-d training API on port %d, pool key %r", self.port, self.settings.pool_key)
        return self

    def wait(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._http.stop()
        left = self.telemetry.flush(self.settings.grace_seconds) + self.dead_letters.flush(self.settings.grace_seconds)
        if left:
            log.warning("%d records not delivered before stopping", left)
        self.shelf.stop()
        self._stopped.set()

    def deliveries(self) -> dict[str, int]:
        """Records delivered, failed after buffering, dropped on a full buffer; dead letters that failed."""
        counts = self.telemetry.counts
        return {"delivered": counts.delivered, "failed": counts.failed, "dropped": counts.dropped,
                "dead_letters_failed": self.dead_letters.failed}

    def _poll(self) -> None:
        while not self._stopped.wait(POLL_S):
            self.telemetry.poll()
            self.dead_letters.poll()


def serve(settings: TrainingApiSettings, kafka: KafkaSettings) -> int:
    """Run one server until SIGTERM or SIGINT, then stop gracefully."""
    return serve_until_signal(TrainingServer(settings, kafka).start(), "llmd-training")
