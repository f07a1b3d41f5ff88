"""The model-update tailer: replays the compacted ``model-updates`` topic into a :class:`ModelRuntime`.

It follows the topic from the beginning (:func:`headroom.model_topic.follow`: no committed offsets), so
every instance sees the newest version of every model. What was on the topic when it started is replayed
through :class:`~predictor.replay.Replay` (only the newest acceptable version of each model is verified);
it is :attr:`ready` once it has consumed up to the end offsets it saw then, and keeps applying new versions
as they arrive; fetches wait at most ``fetch.wait.max.ms`` so a new version is serving well under a second
after it is published.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from confluent_kafka import Message

from headroom.contract.topics import KafkaSettings
from headroom.model_topic import CAUGHT_UP, follow
from headroom.predictor.replay import Replay
from headroom.predictor.runtime import ApplyResult, ModelRuntime
from headroom.threads import BackgroundThread

log = logging.getLogger(__name__)


class ModelUpdateTailer(BackgroundThread):
    """A background thread applying every model-update message to ``runtime``: start, then stop."""

    thread_name = "model-update-tailer"

    def __init__(self, runtime: ModelRuntime, kafka: KafkaSettings, *, fetch_wait_ms: int = 20,
                 on_result: Callable[[ApplyResult, float], None] | None = None,
                 on_replay: Callable[[Mapping[tuple[str, str], int]], None] | None = None) -> None:
        super().__init__()
        self.runtime = runtime
        self.kafka = kafka
        self.fetch_wait_ms = fetch_wait_ms
        self._on_result = on_result  # (result, seconds from publish to applied)
        self._on_replay = on_replay  # the start-up replay's messages by (outcome, reason), once it ends
        self._ready = threading.Event()
        self.consumed = 0
        self.error: BaseException | None = None

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def _run(self) -> None:
        replay = Replay(self.runtime)
        try:
            for item in follow(self.kafka, poll_s=0.1, topic_wait_s=None, log_errors=True,
                               options={"fetch.wait.max.ms": self.fetch_wait_ms}):
                if self._stop.is_set():
                    return
                if item is CAUGHT_UP and not self._ready.is_set():
                    replay.finish()
                    if self._on_replay is not None:
                        self._on_replay(replay.outcomes)
                    log.info("model-update tailer caught up: %d messages, %d models live",
                             self.consumed, len(self.runtime.live()))
                    self._ready.set()
                elif isinstance(item, Message) and not self._ready.is_set():
                    self.consumed += 1
                    replay.add(item.value())
                elif isinstance(item, Message):
                    self._apply(item)
        except BaseException as err:  # surfaced to the server's health status
            self.error = err
            log.exception("model-update tailer stopped")

    def _apply(self, message: Message) -> None:
        self.consumed += 1
        value = message.value()
        if value is None:  # a tombstone: nothing to serve
            return
        result = self.runtime.apply(value)
        _, published_ms = message.timestamp()
        if self._on_result is not None and published_ms > 0:
            self._on_result(result, max(0.0, time.time() - published_ms / 1000.0))
