"""Publishing model versions to ``model-updates``, one acknowledged message each.

Messages are :mod:`contract.model_update` bytes signed with the publisher's key (:mod:`contract.signing`),
keyed by the model key (:func:`update_message`), so the compacted topic keeps the newest version of every
model. Reading them back is :mod:`headroom.model_topic`.
:class:`ModelPublisher` writes whatever it is given (tools, replays, tests); the worker publishes through
:class:`streams.ownership.FencedPublisher`, which writes a pool's versions only while it owns the pool.
"""

from __future__ import annotations

from headroom.contract.model_update import ModelUpdate, encode_update
from headroom.contract.signing import SigningKey
from headroom.contract.topics import MODEL_MESSAGE_MAX_BYTES, KafkaSettings
from headroom.errors import HeadroomError
from headroom.kafka_clients import producer


class PublishError(HeadroomError, RuntimeError):
    """A model update could not be written to Kafka."""


class PublishFenced(PublishError):
    """This worker does not own the telemetry partition it wrote for (any longer); nothing was written."""


def update_message(update: ModelUpdate, key: SigningKey | None) -> tuple[bytes, bytes]:
    """The key and value ``update`` is published as, signed with ``key`` (unsigned when None)."""
    message = encode_update(update)
    return update.key.encode(), key.sign(message) if key is not None else message


class ModelPublisher:
    """Writes model updates signed with ``key`` (unsigned when None: for readers that allow it), one
    acknowledged message each."""

    def __init__(self, kafka: KafkaSettings, key: SigningKey | None, timeout_s: float = 30.0):
        self._topic = kafka.model_topic
        self._key = key
        self._timeout_s = timeout_s
        self._producer = producer(kafka, {"acks": "all", "enable.idempotence": True,
                                          "message.max.bytes": MODEL_MESSAGE_MAX_BYTES, "linger.ms": 0})

    def owns(self, pool_key: str) -> bool:
        return True

    def publish(self, update: ModelUpdate) -> None:
        """Write ``update`` and wait for the broker's acknowledgement."""
        key, value = update_message(update, self._key)
        errors: list[object] = []
        self._producer.produce(self._topic, key=key, value=value,
                               on_delivery=lambda err, _msg: errors.append(err) if err else None)
        remaining = self._producer.flush(self._timeout_s)
        if remaining or errors:
            raise PublishError(f"model update {update.key} v{update.version} was not written to "
                               f"{self._topic!r}: {errors[0] if errors else 'delivery timed out'}")
