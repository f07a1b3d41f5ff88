"""The telemetry partitions a worker owns, and the one way it writes anything that depends on owning them.

A worker owns the telemetry partitions whose window-table partitions Faust assigned to it, and with them
the pools homed there (:func:`contract.partitions.home_partition`). Everything it writes because it owns
partition ``p`` goes through :meth:`PartitionOwnership.write` as one Kafka transaction of ``p``'s own
transactional producer (id ``<app id>-partition-<p>``): a flush's dead letters, window changes and
high-water mark (:mod:`streams.consume`), and each model version of a pool homed at ``p``
(:class:`FencedPublisher`). Taking ``p`` over (:meth:`~PartitionOwnership.fence`) initialises that
transactional id, which fences every earlier producer of it and aborts whatever transaction it left
open — so a worker that lost ``p``, stopped, paused or cut off without knowing it, cannot write a window
change or a model version for ``p`` afterwards: the broker refuses it (:class:`~trainer.publish.PublishFenced`).
Readers of ``model-updates`` read committed messages only (librdkafka's default), so they never see a
version whose transaction was aborted.

The owner check against the current assignment (:meth:`~PartitionOwnership.owns_pool`) keeps a worker
that knows it lost a partition from training its pools at all; the broker's fence stops one that does
not know yet.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from confluent_kafka import KafkaError, KafkaException, Producer

from headroom.contract.model_update import ModelUpdate
from headroom.contract.partitions import home_partition
from headroom.contract.signing import SigningKey
from headroom.contract.topics import MODEL_MESSAGE_MAX_BYTES, KafkaSettings
from headroom.kafka_clients import librdkafka_logger, producer
from headroom.trainer.publish import PublishError, PublishFenced, update_message

log = logging.getLogger(__name__)

_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


class Message(NamedTuple):
    """One message of a partition's transaction (``partition`` None: the topic's partitioner decides)."""

    topic: str
    key: bytes | None
    value: bytes | None
    partition: int | None = None
    headers: list[tuple[str, str | bytes | None]] | None = None


class PartitionOwnership:
    """One transactional producer per owned telemetry partition; see the module docstring.

    Taking partitions over has two steps: :meth:`fence` (as soon as they are assigned: earlier writers
    are fenced) and :meth:`open` (once the worker has read what it needs — windows, model versions —
    from before: from then on it writes). :meth:`release` (before each revocation) ends both. They may
    run while :meth:`write` runs on other threads: a transaction in progress when ownership changes is
    finished (or fails) before the change returns.
    """

    def __init__(self, kafka: KafkaSettings, app_id: str, *, timeout_s: float = 30.0,
                 transaction_timeout_s: float = 10.0):
        self.partitions = kafka.telemetry_partitions
        self._kafka = kafka
        self._app_id = app_id
        self._timeout_s = timeout_s
        self._options = {"message.max.bytes": MODEL_MESSAGE_MAX_BYTES, "linger.ms": 0,
                         "logger": librdkafka_logger(__name__),
                         "transaction.timeout.ms": int(transaction_timeout_s * 1000)}
        self._fenced: dict[int, Producer] = {}  # taken over, not yet written for
        self._producers: dict[int, Producer] = {}  # owned: written for
        self._lock = threading.Lock()

    def transactional_id(self, partition: int) -> str:
        return f"{self._app_id}-partition-{partition}"

    @property
    def taken(self) -> frozenset[int]:
        """The partitions fenced for this worker (opened or not)."""
        return frozenset(self._fenced)

    @property
    def owned(self) -> frozenset[int]:
        """The partitions this worker writes for."""
        return frozenset(self._producers)

    def home(self, pool_key: str) -> int:
        return home_partition(pool_key, self.partitions)

    def owns_pool(self, pool_key: str) -> bool:
        return self.home(pool_key) in self._producers

    def fence(self, partitions: Iterable[int]) -> None:
        """Take exactly ``partitions`` over, fencing their earlier writers, and write for none until :meth:`open`;
        :class:`PublishError` names those that could not be taken over (the others are).

        Every producer is made anew: even if this worker owned a partition before, another may have owned
        it in between, and that one must be fenced.
        """
        wanted = sorted(set(partitions))
        with self._lock:
            self._producers.clear()
            self._fenced.clear()
            if not wanted:
                return
            with ThreadPoolExecutor(len(wanted), thread_name_prefix="headroom-fence") as pool:
                results = dict(zip(wanted, pool.map(self._take_over, wanted)))
            failed = {p: err for p, err in results.items() if isinstance(err, KafkaException)}
            self._fenced.update({p: client for p, client in results.items() if isinstance(client, Producer)})
        if failed:
            raise PublishError("cannot take over telemetry partitions " + "; ".join(
                f"{p} ({self.transactional_id(p)}): {err}" for p, err in sorted(failed.items())))

    def _take_over(self, partition: int) -> Producer | KafkaException:
        client = producer(self._kafka, {**self._options, "transactional.id": self.transactional_id(partition)})
        try:
            client.init_transactions(self._timeout_s)
        except KafkaException as err:
            return err
        return client

    def open(self) -> frozenset[int]:
        """Write for the partitions taken over; returns them."""
        with self._lock:
            self._producers.update(self._fenced)
            return self.owned

    def release(self) -> None:
        """Own nothing until the next :meth:`fence` (waits for a transaction in progress)."""
        with self._lock:
            self._producers.clear()
            self._fenced.clear()

    def write(self, partition: int, messages: Sequence[Message]) -> None:
        """Write ``messages`` in one transaction of ``partition``'s producer.

        :class:`PublishFenced` when the partition is not owned, or another worker has taken it over (its
        producer is then dropped: only a new assignment makes another); :class:`PublishError` when the
        transaction fails otherwise (it is aborted; nothing was written).
        """
        with self._lock:
            client = self._producers.get(partition)
            if client is None:
                raise PublishFenced(f"this worker does not own telemetry partition {partition}")
            try:
                client.begin_transaction()
                for message in messages:
                    if message.partition is None:
                        client.produce(message.topic, key=message.key, value=message.value, headers=message.headers)
                    else:
                        client.produce(message.topic, key=message.key, value=message.value, headers=message.headers,
                                       partition=message.partition)
                client.commit_transaction(self._timeout_s)
            except (KafkaException, BufferError) as err:
                error = err.args[0] if err.args and isinstance(err.args[0], KafkaError) else None
                if error is not None and (error.code() in _FENCED or error.fatal()):
                    del self._producers[partition], self._fenced[partition]
                    raise PublishFenced(f"writing for telemetry partition {partition} was fenced: {error}") from err
                try:
                    client.abort_transaction(self._timeout_s)
                except KafkaException as abort:
                    log.warning("aborting a transaction of telemetry partition %d: %s", partition, abort)
                raise PublishError(f"a transaction of telemetry partition {partition} failed: {err}") from err


class FencedPublisher:
    """The worker's model publisher: a version of a pool is written, signed with ``key``, only by its home
    partition's owner."""

    def __init__(self, ownership: PartitionOwnership, kafka: KafkaSettings, key: SigningKey | None):
        self.ownership = ownership
        self._key = key
        self._topic = kafka.model_topic

    def owns(self, pool_key: str) -> bool:
        return self.ownership.owns_pool(pool_key)

    def publish(self, update: ModelUpdate) -> None:
        key, value = update_message(update, self._key)
        try:
            self.ownership.write(self.ownership.home(update.pool_key), [Message(self._topic, key, value)])
        except PublishError as err:
            raise type(err)(f"model update {update.key} v{update.version}: {err}") from err
