"""Publishing model versions to ``model-updates``, one acknowledged message each.

Messages are :mod:`contract.model_update` bytes signed with the publisher's key (:mod:`contract.signing`),
keyed by the model key, so the compacted topic keeps the newest version of every model. Reading them back
is :mod:`headroom.model_topic`.

:class:`ModelPublisher` writes whatever it is given (tools, replays, tests). The worker publishes through
:class:`FencedPublisher`: a pool's versions may come only from the worker that owns the pool's home
telemetry partition (:func:`contract.partitions.home_partition`), and Kafka's transactions enforce it. Each
owned partition ``p`` has a transactional producer with the id ``<app id>-models-<p>``; a new owner
initialising that id fences every earlier producer of it (and aborts what it left open), so a worker that
lost the partition — stopped, paused or cut off without knowing it — cannot commit a version afterwards.
Each version is one transaction; readers (``isolation.level=read_committed``, librdkafka's default) never
see an aborted one. The owner check against the current assignment (:meth:`FencedPublisher.owns`) stops a
worker that knows it lost a partition before it trains; the broker's fence stops one that does not know yet.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException, Producer

from headroom.contract.model_update import ModelUpdate, encode_update
from headroom.contract.partitions import home_partition
from headroom.contract.signing import SigningKey
from headroom.contract.topics import MODEL_MESSAGE_MAX_BYTES, KafkaSettings
from headroom.errors import HeadroomError
from headroom.kafka_clients import producer

log = logging.getLogger(__name__)

_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
_OPTIONS = {"acks": "all", "enable.idempotence": True, "message.max.bytes": MODEL_MESSAGE_MAX_BYTES, "linger.ms": 0}


class PublishError(HeadroomError, RuntimeError):
    """A model update could not be written to Kafka."""


class PublishFenced(PublishError):
    """This worker does not own the pool's home telemetry partition (any longer); nothing was written."""


class ModelPublisher:
    """Writes model updates signed with ``key`` (unsigned when None: for readers that allow it), one
    acknowledged message each."""

    def __init__(self, kafka: KafkaSettings, key: SigningKey | None, timeout_s: float = 30.0):
        self._topic = kafka.model_topic
        self._key = key
        self._timeout_s = timeout_s
        self._producer = producer(kafka, _OPTIONS)

    def owns(self, pool_key: str) -> bool:
        return True

    def publish(self, update: ModelUpdate) -> None:
        """Write ``update`` and wait for the broker's acknowledgement."""
        errors: list[object] = []
        _produce(self._producer, self._topic, update, errors, self._key)
        remaining = self._producer.flush(self._timeout_s)
        if remaining or errors:
            raise PublishError(f"model update {update.key} v{update.version} was not written to "
                               f"{self._topic!r}: {errors[0] if errors else 'delivery timed out'}")


class FencedPublisher:
    """Writes a pool's model updates only while this worker owns the pool's home partition (see above).

    :meth:`own` (after each assignment) and :meth:`release` (before each revocation) change what is owned;
    :meth:`publish` may run on another thread meanwhile: a version being written when ownership changes is
    finished (or fails) before the change returns.
    """

    def __init__(self, kafka: KafkaSettings, app_id: str, key: SigningKey | None, *, timeout_s: float = 30.0,
                 transaction_timeout_s: float = 10.0):
        self._kafka = kafka
        self._key = key
        self._topic = kafka.model_topic
        self._app_id = app_id
        self._timeout_s = timeout_s
        self._options = {**_OPTIONS, "transaction.timeout.ms": int(transaction_timeout_s * 1000), "logger": log}
        self._producers: dict[int, Producer] = {}  # owned telemetry partition -> its transactional producer
        self._lock = threading.Lock()

    def transactional_id(self, partition: int) -> str:
        return f"{self._app_id}-models-{partition}"

    @property
    def owned(self) -> frozenset[int]:
        return frozenset(self._producers)

    def own(self, partitions: Iterable[int]) -> None:
        """Publish for exactly the pools homed in ``partitions`` from now on, fencing their earlier publishers.

        Every producer is made anew: even if this worker owned a partition before, another may have owned
        it in between, and that one must be fenced.
        """
        wanted = sorted(set(partitions))
        with self._lock:
            self._producers.clear()
            for partition in wanted:
                client = producer(self._kafka, {**self._options,
                                                "transactional.id": self.transactional_id(partition)})
                try:
                    client.init_transactions(self._timeout_s)
                except KafkaException as err:
                    raise PublishError(f"cannot take over publishing for telemetry partition {partition} "
                                       f"({self.transactional_id(partition)}): {err}") from err
                self._producers[partition] = client

    def release(self) -> None:
        """Publish nothing until the next :meth:`own` (waits for a version being written)."""
        with self._lock:
            self._producers.clear()

    def owns(self, pool_key: str) -> bool:
        return self.home(pool_key) in self._producers

    def home(self, pool_key: str) -> int:
        return home_partition(pool_key, self._kafka.telemetry_partitions)

    def publish(self, update: ModelUpdate) -> None:
        """Write ``update`` in a transaction of its pool's partition; :class:`PublishFenced` when not its owner."""
        partition = self.home(update.pool_key)
        with self._lock:
            client = self._producers.get(partition)
            if client is None:
                raise PublishFenced(f"model update {update.key} v{update.version}: this worker does not own "
                                    f"telemetry partition {partition}, the pool's home")
            try:
                client.begin_transaction()
                _produce(client, self._topic, update, [], self._key)
                client.commit_transaction(self._timeout_s)  # fails if the message did
            except KafkaException as err:
                error = err.args[0] if err.args and isinstance(err.args[0], KafkaError) else None
                if error is not None and (error.code() in _FENCED or error.fatal()):
                    del self._producers[partition]  # unusable; only a new assignment makes another
                    raise PublishFenced(f"model update {update.key} v{update.version}: publishing for telemetry "
                                        f"partition {partition} was fenced ({error})") from err
                if error is not None and error.txn_requires_abort():
                    client.abort_transaction(self._timeout_s)
                raise PublishError(f"model update {update.key} v{update.version} was not written to "
                                   f"{self._topic!r}: {err}") from err


def _produce(client: Producer, topic: str, update: ModelUpdate, errors: list[object], key: SigningKey | None) -> None:
    message = encode_update(update)
    client.produce(topic, key=update.key.encode(), value=key.sign(message) if key is not None else message,
                   on_delivery=lambda err, _msg: errors.append(err) if err else None)
