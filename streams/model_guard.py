"""Keeping ``model-updates`` honest: the worker, the one signer of models, puts the newest version of each
model it owns back whenever anything else lands under that model's key.

Compaction keeps the last message of each key. Whoever can write the topic can put a message under a genuine
model's key — garbage, an unsigned or forged model, a genuinely signed older version, a tombstone — and once
the log cleaner has run, a reader that starts would find that message in place of the newest version: no
model, or an old one. No choice of keys prevents it (a writer that can read the topic sees every key), and
readers cannot tell a deleted version from one never published. So the signer repairs: the guard follows the
topic, judges the last message under each key of a model the worker knows as every reader judges it (the
worker's trust: signature, checksum, key, version), and when that last message is anything but the model's
newest version, publishes that version again, once per key however many messages came. Repairs are counted by
why (``headroom_model_repairs_total{reason}``: a rejection reason of :mod:`contract.model_update`,
``tombstone``, ``misplaced`` for a model under another model's key, ``replayed`` for an older version) and
logged. Only the owner of a pool's home partition repairs its models (through the worker's fenced publisher);
a key waits while no worker here owns it.

The topic's ``min.compaction.lag.ms`` (:mod:`contract.topics`) keeps the cleaner off every message for ten
minutes, so the repair lands before the cleaner could drop the genuine version, even across a worker's restart:
at start the guard reads the whole topic, so what was written while no worker ran is judged too.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from confluent_kafka import Message

from headroom.contract.model_update import ModelUpdate
from headroom.contract.signing import TrustedKeys
from headroom.contract.topics import KafkaSettings
from headroom.model_topic import CAUGHT_UP, follow, received
from headroom.streams.metrics import WORKER
from headroom.threads import BackgroundThread
from headroom.trainer.live import LiveModels, live_model
from headroom.trainer.publish import PublishError

log = logging.getLogger(__name__)


class Publisher(Protocol):
    def owns(self, pool_key: str) -> bool: ...

    def publish(self, update: ModelUpdate) -> None: ...


class ModelGuard(BackgroundThread):
    """Follows ``model-updates`` and repairs what lands under the keys of ``live``'s models (module docstring)."""

    thread_name = "model-guard"

    def __init__(self, kafka: KafkaSettings, trust: TrustedKeys, live: LiveModels, publisher: Publisher, *,
                 poll_s: float = 0.2, batch_s: float = 1.0) -> None:
        super().__init__()
        self.kafka, self.trust, self.live, self.publisher = kafka, trust, live, publisher
        self.poll_s = poll_s
        self.batch_s = batch_s  # longest a repair waits for a stream of messages to end
        self.pending: dict[str, str] = {}  # model key -> why its last message needs a repair
        self.repairs = 0

    def judge(self, message: Message) -> tuple[str, str | None] | None:
        """(model key, why it needs a repair or None) for a message under the key of a model the worker knows;
        None for any other."""
        raw_key = message.key()
        if raw_key is None:
            return None
        key = raw_key.decode("utf-8", "replace")
        held = self.live.held(key)
        if held is None:
            return None
        got = received(message, self.trust)
        update = got.update
        if update is None:
            return key, got.reason
        if update.key != key:
            return key, "misplaced"
        if update.version < held.version:
            return key, "replayed"
        if update.version > held.version:  # another worker's newer version: it becomes the one to keep
            self.live.offer(live_model(update))
        return key, None

    def repair(self) -> int:
        """Publish again the newest version of every pending key this worker owns; returns how many."""
        done = 0
        for key, reason in list(self.pending.items()):
            held = self.live.held(key)
            if held is None or not self.publisher.owns(held.update.pool_key):
                continue
            try:
                self.publisher.publish(held.update)
            except PublishError as err:
                log.warning("model %s: could not publish v%d again: %s", key, held.version, err)
                continue
            del self.pending[key]
            WORKER.model_repairs.labels(reason).inc()
            log.warning("model %s: the last message under its key was %s; published v%d again so that compaction "
                        "keeps it", key, reason, held.version)
            done += 1
        self.repairs += done
        return done

    def _run(self) -> None:
        since = None  # when the oldest pending judgement was made
        caught_up = False  # repairs wait until the topic as it was at start has been read: its last messages
        for item in follow(self.kafka, poll_s=self.poll_s, topic_wait_s=None, log_errors=True):
            if self._stop.is_set():
                return
            caught_up = caught_up or item == CAUGHT_UP
            if isinstance(item, Message):
                judged = self.judge(item)
                if judged is not None:
                    key, reason = judged
                    if reason is None:
                        self.pending.pop(key, None)
                    else:
                        self.pending[key] = reason
                        since = since or time.monotonic()
                        continue
            if caught_up and self.pending and (not isinstance(item, Message)
                                               or time.monotonic() - (since or 0) > self.batch_s):
                self.repair()  # the topic is quiet (or has been busy for batch_s): its last messages are known
                since = time.monotonic() if self.pending else None
