"""The model versions on ``model-updates``, as llm-d's training server lists and dumps them.

A background thread follows the topic from the beginning (:func:`headroom.model_topic.follow`) and keeps,
per model key, the newest version that every reader would accept — signed by a trusted key, and loadable
(:func:`contract.model_update.load_update`) — with its booster and the message as published; how many versions
of each key it has seen published, and how many messages it rejected, by reason (unsigned, unknown-key,
bad-signature, invalid, ...). Nothing here trains: the worker does, from the telemetry the training API sends.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Message

from headroom.contract.model_update import REPLAYED, STALE, InvalidUpdate, ModelUpdate, load_update, refusal
from headroom.contract.signing import TrustedKeys
from headroom.contract.topics import KafkaSettings
from headroom.model_topic import CAUGHT_UP, follow, received
from headroom.threads import BackgroundThread

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShelvedModel:
    update: ModelUpdate
    booster: Any  # xgboost.Booster
    message: bytes = b""  # the message as published, signature and all


class ModelShelf(BackgroundThread):
    thread_name = "model-shelf"

    def __init__(self, kafka: KafkaSettings, trust: TrustedKeys) -> None:
        super().__init__()
        self.kafka = kafka
        self.trust = trust
        self.models: dict[str, ShelvedModel] = {}  # model key -> newest loadable version
        self.published: Counter[str] = Counter()  # model key -> versions seen
        self.rejected: Counter[str] = Counter()  # reason -> messages not listed
        self.caught_up = threading.Event()

    def get(self, pool_key: str, target: str, objective: str) -> ShelvedModel | None:
        return self.models.get(f"{pool_key}/{target}/{objective}")

    def put(self, update: ModelUpdate, message: bytes = b"") -> bool:
        """Shelve ``update`` (published as ``message``) if it is newer than the shelved version and loadable;
        True when shelved."""
        self.published[update.key] += 1
        held = self.models.get(update.key)
        try:
            refused = refusal(update, held.update.version if held else None, self.kafka.max_version_jump)
            if refused is not None:
                if refused.reason in (STALE, REPLAYED):
                    return False
                raise refused
            booster = load_update(update)
        except InvalidUpdate as err:
            self.rejected[getattr(err, "reason", "invalid")] += 1
            log.warning("model %s v%d is not listed: %s", update.key, update.version, err)
            return False
        self.models = {**self.models, update.key: ShelvedModel(update, booster, message)}
        return True

    def _run(self) -> None:
        try:
            for item in follow(self.kafka, poll_s=0.2, topic_wait_s=None, log_errors=True):
                if self._stop.is_set():
                    return
                if item is CAUGHT_UP:
                    self.caught_up.set()
                elif isinstance(item, Message):
                    message = received(item, self.trust)
                    if message.update is not None:
                        self.put(message.update, item.value() or b"")
                    else:
                        self.rejected[message.reason or "invalid"] += 1
                        log.warning("model-updates offset %d not listed (%s): %s", message.offset, message.reason,
                                    message.error)
        except Exception:
            log.exception("following model-updates stopped")
