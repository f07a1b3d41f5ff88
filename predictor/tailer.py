"""The model-update tailer: replays the compacted ``model-updates`` topic into a :class:`ModelRuntime`.

It reads every partition from the beginning with no committed offsets (a unique group id that never
commits), so every instance sees the newest version of every model. It is :attr:`ready` once it has
consumed up to the end offsets it saw when it started, then keeps following new versions; fetches wait
at most ``fetch.wait.max.ms`` so a new version is serving well under a second after it is published.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from headroom.contract.topics import MODEL_MESSAGE_MAX_BYTES, KafkaSettings
from headroom.predictor.runtime import ApplyResult, ModelRuntime

log = logging.getLogger(__name__)


class ModelUpdateTailer:
    """A background thread applying every model-update message to ``runtime``: start, then stop."""

    def __init__(self, runtime: ModelRuntime, kafka: KafkaSettings, *, fetch_wait_ms: int = 20,
                 on_result: Callable[[ApplyResult, float], None] | None = None) -> None:
        self.runtime = runtime
        self.kafka = kafka
        self.fetch_wait_ms = fetch_wait_ms
        self._on_result = on_result  # (result, seconds from publish to applied)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self.consumed = 0
        self.error: BaseException | None = None

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def start(self) -> ModelUpdateTailer:
        self._thread = threading.Thread(target=self._run, name="model-update-tailer", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _consumer(self) -> Consumer:
        return Consumer({
            "bootstrap.servers": self.kafka.bootstrap_servers,
            "group.id": f"headroom-predictor-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": self.fetch_wait_ms,
            "max.partition.fetch.bytes": 2 * MODEL_MESSAGE_MAX_BYTES,
            "fetch.max.bytes": 4 * MODEL_MESSAGE_MAX_BYTES,
            "receive.message.max.bytes": 8 * MODEL_MESSAGE_MAX_BYTES,
        })

    def _run(self) -> None:
        consumer = self._consumer()
        try:
            remaining = self._assign_from_beginning(consumer)
            while not self._stop.is_set():
                message = consumer.poll(0.1)
                if message is None:
                    continue
                partition = message.partition()
                if message.error():
                    if message.error().code() == KafkaError._PARTITION_EOF:
                        remaining.pop(partition, None)
                    else:
                        log.warning("model-update tailer: %s", message.error())
                else:
                    self._apply(message)
                    if remaining.get(partition, 0) <= message.offset() + 1:
                        remaining.pop(partition, None)
                if not remaining and not self._ready.is_set():
                    log.info("model-update tailer caught up: %d messages, %d models live",
                             self.consumed, len(self.runtime.live()))
                    self._ready.set()
        except BaseException as err:  # surfaced to the server's health status
            self.error = err
            log.exception("model-update tailer stopped")
        finally:
            consumer.close()

    def _assign_from_beginning(self, consumer: Consumer) -> dict[int, int]:
        """Assign every partition at its start; returns the end offset seen now for each."""
        topic = self.kafka.model_topic
        while not self._stop.is_set():
            metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
            if metadata is not None and metadata.error is None and metadata.partitions:
                break
            log.warning("model-update tailer: topic %r not available yet (%s)", topic,
                        metadata.error if metadata else "no metadata")
            self._stop.wait(1.0)
        else:
            return {}
        ends = {}
        for partition in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            if high > low:
                ends[partition] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in metadata.partitions])
        if not ends:
            self._ready.set()
        return ends

    def _apply(self, message) -> None:
        self.consumed += 1
        if message.value() is None:  # a tombstone: nothing to serve
            return
        result = self.runtime.apply(message.value())
        _, published_ms = message.timestamp()
        if self._on_result is not None and published_ms > 0:
            self._on_result(result, max(0.0, time.time() - published_ms / 1000.0))
