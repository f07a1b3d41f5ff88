"""Telemetry read in batches: a librdkafka consumer that the worker points at the partitions it owns.

Faust hands every message through its own per-event machinery (fetcher, conductor, stream, event,
acknowledgement), which costs more than validating and windowing the record; the telemetry topic is
therefore read here, a batch at a time, outside that path. The reader joins no consumer group: the
worker decides which partitions it reads (those whose window table partitions Faust assigned to it) and
from which offset (one past each partition's high-water mark in the table). It commits the offsets of
flushed records to its own group, ``<app id>-telemetry``, so consumer-lag tools show how far behind it
is; nothing reads those offsets back.

Every call to the consumer runs on one thread (librdkafka consumers are not safe to share), so the
event loop never blocks on the network.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from headroom.contract.topics import KafkaSettings
from headroom.kafka_clients import group_consumer, position

log = logging.getLogger(__name__)
T = TypeVar("T")


class Delivery(NamedTuple):
    """One telemetry message as the worker sees it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class TelemetryReader:
    def __init__(self, kafka: KafkaSettings, group_id: str, *, batch_records: int):
        self.topic = kafka.telemetry_topic
        self.batch_records = batch_records
        self._kafka, self._group_id = kafka, group_id
        self._consumer: Consumer | None = None  # made on the reader's thread when first given partitions
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="headroom-telemetry")

    async def _call(self, function: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, function, *args)

    async def assign(self, starts: dict[int, int | None]) -> None:
        """Read exactly these partitions, each from its offset (None: from the beginning)."""
        await self._call(self._assign, [
            TopicPartition(self.topic, partition, OFFSET_BEGINNING if offset is None else offset)
            for partition, offset in sorted(starts.items())])

    def _assign(self, partitions: list[TopicPartition]) -> None:
        if self._consumer is None:
            if not partitions:
                return
            self._consumer = group_consumer(self._kafka, self._group_id, {"auto.offset.reset": "earliest",
                                                                         "enable.partition.eof": False})
        self._consumer.assign(partitions)

    async def fetch(self, timeout_s: float) -> list[Delivery]:
        """Up to ``batch_records`` messages, waiting at most ``timeout_s`` for the first."""
        return await self._call(self._fetch, timeout_s)

    def _fetch(self, timeout_s: float) -> list[Delivery]:
        deliveries: list[Delivery] = []
        if self._consumer is None:
            return deliveries
        for message in self._consumer.consume(self.batch_records, timeout_s):
            error = message.error()
            if error is None:
                deliveries.append(Delivery(*position(message), message.key(), message.value()))
            else:  # partition EOF events are off, so every error here is a real one
                log.warning("reading %s: %s", self.topic, error)
        return deliveries

    async def commit(self, next_offsets: dict[int, int]) -> None:
        """Record, for lag monitoring, the next offset to read of each partition."""
        if next_offsets and (client := self._consumer) is not None:
            await self._call(lambda: client.commit(offsets=[
                TopicPartition(self.topic, p, o) for p, o in next_offsets.items()], asynchronous=True))

    async def close(self) -> None:
        if self._consumer is not None:
            await self._call(self._consumer.close)
        self._thread.shutdown(wait=False)
