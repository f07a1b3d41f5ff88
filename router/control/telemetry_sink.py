"""Completed-request telemetry to Kafka, without ever holding up routing.

:class:`KafkaTelemetry` wraps an idempotent confluent-kafka producer with a bounded local buffer
(``buffer_records``). :meth:`send` never blocks: when the buffer is full the record is dropped, counted
and logged (at most every few seconds). While the broker is down records wait in the buffer and are
delivered, in order and without duplicates, when it returns (messages do not time out unless
``delivery_timeout_s`` is set). A record counts as delivered only once the broker has acknowledged it
(:class:`TelemetryCounts`, exported by :mod:`router.control.metrics`). Someone must call :meth:`poll` regularly (the
server does, on its event loop) to serve delivery reports.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from confluent_kafka import KafkaError, Message

from headroom.contract.telemetry import TelemetryRecord, encode, partition_key
from headroom.contract.topics import KafkaSettings
from headroom.kafka_clients import librdkafka_logger, producer
from headroom.throttled_log import ThrottledLog

log = logging.getLogger(__name__)


class TelemetrySink(Protocol):
    def send(self, record: TelemetryRecord) -> None: ...


@dataclass
class TelemetryCounts:
    buffered: int = 0  # accepted into the buffer
    delivered: int = 0  # acknowledged by the broker
    failed: int = 0  # permanently failed after being buffered
    dropped: int = 0  # refused because the buffer was full


@dataclass
class MemoryTelemetry:
    """Keeps records in a list: for routers run without Kafka (``telemetry`` disabled)."""

    records: list[TelemetryRecord] = field(default_factory=list)
    limit: int = 10_000

    def send(self, record: TelemetryRecord) -> None:
        self.records.append(record)
        del self.records[:-self.limit]


class KafkaTelemetry:
    def __init__(self, kafka: KafkaSettings, buffer_records: int = 100_000, delivery_timeout_s: float = 0.0,
                 client_id: str = "headroom-router"):
        self.topic = kafka.telemetry_topic
        self.counts = TelemetryCounts()
        self._dropped_log = ThrottledLog(log, interval_s=10.0)
        self._failed_log = ThrottledLog(log, interval_s=10.0)
        self._error_log = ThrottledLog(log, interval_s=60.0)  # librdkafka reports an unreachable broker again and again
        self._producer = producer(kafka, {
            "client.id": client_id,
            "enable.idempotence": True,
            "linger.ms": 5,
            "compression.type": "lz4",
            "queue.buffering.max.messages": buffer_records,
            "message.timeout.ms": int(delivery_timeout_s * 1000),  # 0: wait for the broker as long as it takes
            "reconnect.backoff.max.ms": 1000,
            "error_cb": self._on_error,
            "logger": librdkafka_logger(__name__),
        })

    def send(self, record: TelemetryRecord) -> None:
        try:
            self._producer.produce(self.topic, key=partition_key(record), value=encode(record),
                                   on_delivery=self._on_delivery)
            self.counts.buffered += 1
        except BufferError:
            self.counts.dropped += 1
            self._dropped_log.event(logging.WARNING, "telemetry record dropped: %d records wait for Kafka, the "
                                    "buffer is full (HEADROOM_ROUTER_TELEMETRY_BUFFER)", len(self._producer))
        self._producer.poll(0)

    def poll(self) -> None:
        self._producer.poll(0)

    @property
    def buffered(self) -> int:
        return len(self._producer)

    def flush(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for the buffer to drain; returns how many records are still buffered."""
        return self._producer.flush(timeout_s)

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.counts.delivered += 1
        else:
            self.counts.failed += 1
            self._failed_log.event(logging.WARNING, "telemetry record not delivered to %s: %s", self.topic, err)

    def _on_error(self, err: KafkaError) -> None:
        self._error_log.event(logging.INFO if err.code() == KafkaError._TRANSPORT else logging.WARNING,
                              "telemetry producer: %s", err)
