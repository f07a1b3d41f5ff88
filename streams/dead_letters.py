"""Dead letters: rejected telemetry in the dead-letter topic, bounded in size and sent until stored.

A letter (:func:`letter_of`) keeps the original's key and at most :data:`MAX_LETTER_BYTES` of its bytes;
its headers say why the record was rejected (:data:`REASON_HEADER`), where it came from
(:data:`SOURCE_HEADER`: topic/partition/offset), how large it was and its sha256, so a record of any size
the telemetry topic took fits in the dead-letter topic and can be found and checked against the original.

Sending never stops the worker: a letter the broker refuses for its size is sent again without the
original's bytes (reason, source, size and checksum stay); any other failure is sent again after a
backoff, until the letter is stored. Every failure is counted
(``headroom_telemetry_dead_letter_failures_total{error}``) and logged, at most every few seconds.
:meth:`DeadLetters.send` returns a future that resolves once the letter is stored: the consuming loop
waits for it before a high-water mark moves past the record.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass, replace

from confluent_kafka import KafkaError, KafkaException

from headroom.contract.topics import REASON_HEADER, SOURCE_HEADER, KafkaSettings
from headroom.kafka_clients import producer
from headroom.streams import metrics
from headroom.streams.reader import Delivery
from headroom.throttled_log import ThrottledLog

log = logging.getLogger(__name__)

BYTES_HEADER = "headroom-original-bytes"
SHA256_HEADER = "headroom-original-sha256"
MAX_LETTER_BYTES = 64 * 1024  # of the original's bytes; a larger original is cut to its first bytes
MAX_KEY_BYTES = 1024
MAX_REASON_CHARS = 2000  # a reason may quote the record (an unknown field's name)
_TOO_LARGE = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE}


@dataclass(frozen=True)
class Letter:
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]


def letter_of(delivery: Delivery, reason: str, source_topic: str) -> Letter:
    """The dead letter of a rejected message."""
    original = delivery.value or b""
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[:MAX_REASON_CHARS] + "…"
    return Letter(
        key=None if delivery.key is None else delivery.key[:MAX_KEY_BYTES], value=original[:MAX_LETTER_BYTES],
        headers=[(REASON_HEADER, reason.encode()),
                 (SOURCE_HEADER, f"{source_topic}/{delivery.partition}/{delivery.offset}".encode()),
                 (BYTES_HEADER, str(len(original)).encode()),
                 (SHA256_HEADER, hashlib.sha256(original).hexdigest().encode())])


class DeadLetters:
    """Sends letters to ``kafka.dlq_topic``; :meth:`run` must run (it serves delivery reports)."""

    def __init__(self, kafka: KafkaSettings, *, retry_backoff_s: float = 1.0, poll_interval_s: float = 0.02):
        self.topic = kafka.dlq_topic
        self.source_topic = kafka.telemetry_topic
        self.retry_backoff_s = retry_backoff_s
        self.poll_interval_s = poll_interval_s
        self._producer = producer(kafka, {"acks": "all", "linger.ms": 5, "message.timeout.ms": 30_000,
                                          "reconnect.backoff.max.ms": 1000})
        self._failures = ThrottledLog(log, interval_s=5.0)
        self._loop: asyncio.AbstractEventLoop | None = None

    def send(self, delivery: Delivery, reason: str) -> asyncio.Future[None]:
        """Send the letter of ``delivery``; the future resolves once it is stored."""
        self._loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = self._loop.create_future()
        self._produce(letter_of(delivery, reason, self.source_topic), future)
        return future

    async def run(self) -> None:
        """Serve delivery reports until cancelled."""
        while True:
            self._producer.poll(0)
            await asyncio.sleep(self.poll_interval_s)

    async def flush(self, timeout_s: float = 10.0) -> int:
        """Wait up to ``timeout_s`` for the letters in flight; returns how many are left."""
        remaining: int = await asyncio.to_thread(self._producer.flush, timeout_s)
        return remaining

    def _produce(self, letter: Letter, future: asyncio.Future[None]) -> None:
        try:
            self._producer.produce(self.topic, key=letter.key, value=letter.value, headers=letter.headers,
                                   on_delivery=lambda err, _msg: self._reported(err, letter, future))
        except BufferError:
            self._failed(KafkaError(KafkaError._QUEUE_FULL), letter, future)
        except KafkaException as err:
            self._failed(err.args[0], letter, future)

    def _reported(self, err: KafkaError | None, letter: Letter, future: asyncio.Future[None]) -> None:
        """A delivery report, served on whichever thread polled: settled on the event loop."""
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._delivered, err, letter, future)

    def _delivered(self, err: KafkaError | None, letter: Letter, future: asyncio.Future[None]) -> None:
        if err is None:
            if not future.done():
                future.set_result(None)
        else:
            self._failed(err, letter, future)

    def _failed(self, err: KafkaError, letter: Letter, future: asyncio.Future[None]) -> None:
        metrics.DEAD_LETTER_FAILURES.labels(err.name()).inc()
        source = dict(letter.headers)[SOURCE_HEADER].decode()
        if err.code() in _TOO_LARGE and letter.value:
            self._failures.event(logging.WARNING, "dead letter of %s refused by %s (%s): sent again without the "
                                 "original's bytes", source, self.topic, err.str())
            self._produce(replace(letter, value=b""), future)
            return
        self._failures.event(logging.WARNING, "dead letter of %s not stored in %s (%s): sending again in %.1f s",
                             source, self.topic, err.str(), self.retry_backoff_s)
        assert self._loop is not None
        self._loop.call_later(self.retry_backoff_s, self._produce, letter, future)
