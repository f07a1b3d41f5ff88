"""The retraining loop: finds windows that are due, trains them off the event loop, publishes promotions.

Training runs in one background thread (so at most one round at a time, and the consumer keeps
consuming); the snapshot handed to it is a shallow copy of the window taken on the event loop. Only the
windows of pools the publisher owns are trained. Each promoted candidate is published, then made live, so
the next round gates against it and version numbers keep growing; a candidate the publisher refuses
because ownership moved (:class:`~trainer.publish.PublishFenced`) is dropped, and so is the rest of its round.

A round has three steps, each a method, so that a replay can run the middle one elsewhere (in another
process, :mod:`backtest.round_pool`): :meth:`Retrainer.start` (the window is due: mark it trained, copy its
rows), :func:`fit_round` (pure: the samples, the candidates, the gate) and :meth:`Retrainer.settle` (publish
the promotions, make them live, leave an unanswered drift to be answered again).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, Protocol

from headroom.contract.model_update import ModelUpdate
from headroom.streams.ingest import Ingestor
from headroom.streams.metrics import WORKER
from headroom.streams.settings import PipelineSettings
from headroom.streams.window_rules import Row, snapshot
from headroom.streams.windows import WindowKey
from headroom.trainer.live import LiveModels, live_model
from headroom.trainer.publish import PublishFenced
from headroom.trainer.rounds import RoundOutcome, train_round
from headroom.trainer.samples import Samples

log = logging.getLogger(__name__)


class Publisher(Protocol):
    def owns(self, pool_key: str) -> bool: ...

    def publish(self, update: ModelUpdate) -> None: ...


class RoundJob(NamedTuple):
    """What one due window trains on, taken when it was due (:meth:`Retrainer.start`)."""

    window: WindowKey
    rows: dict[str, list[Row]]
    window_clock: float
    now: float
    drift_reason: str | None


class Retrainer:
    def __init__(self, ingestor: Ingestor, live: LiveModels, publisher: Publisher, settings: PipelineSettings,
                 clock: Callable[[], float] = time.time):
        self.ingestor = ingestor
        self.live = live
        self.publisher = publisher
        self.settings = settings
        self.clock = clock
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="headroom-train")
        self._wake: asyncio.Event | None = None
        self._gauged: set[WindowKey] = set()  # windows whose size gauges are set
        for key, version in live.versions().items():
            pool_key, target, objective = key.rsplit("/", 2)
            WORKER.model_version.labels(pool_key, target, objective).set(version)

    def wake(self) -> None:
        """Ask for a check now (a drift detector fired)."""
        if self._wake is not None:
            self._wake.set()

    async def run(self, tick_s: float = 0.5) -> None:
        """Check for due windows every ``tick_s`` seconds, or at once when woken; runs until cancelled."""
        self._wake = asyncio.Event()
        try:
            while True:
                try:
                    await asyncio.wait_for(self._wake.wait(), tick_s)
                except TimeoutError:
                    pass
                self._wake.clear()
                await self.run_due()
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)

    async def run_due(self) -> list[RoundOutcome]:
        """Train every window that is due now; returns the outcomes."""
        outcomes: list[RoundOutcome] = []
        windows = self.ingestor.windows
        held = set(windows.keys())
        for window in self._gauged - held:  # moved to another worker in a rebalance
            WORKER.window_rows.remove(*window)
            WORKER.window_strata.remove(*window)
        self._gauged = held
        for window in windows.keys():
            WORKER.window_rows.labels(*window).set(windows.size(window))
            WORKER.window_strata.labels(*window).set(len(windows.strata_counts(window)))
            if not self.publisher.owns(window[0]):
                continue
            job = self.start(window)
            if job is None:
                continue
            loop = asyncio.get_running_loop()
            started = time.perf_counter()
            try:
                outcomes += await loop.run_in_executor(self._executor, self._train, job)
            except Exception:  # a failed round must not stop the worker; the next one retries
                WORKER.training_failures.labels(*window).inc()
                log.exception("training %s/%s failed", *window)
            WORKER.training_seconds.observe(time.perf_counter() - started)
        return outcomes

    def train_due(self) -> list[RoundOutcome]:
        """:meth:`run_due` in the calling thread, without the window gauges: replays drive it after each
        record, on event time."""
        outcomes: list[RoundOutcome] = []
        for window in self.ingestor.windows.keys():
            job = self.start(window) if self.publisher.owns(window[0]) else None
            if job is None:
                continue
            started = time.perf_counter()
            try:
                outcomes += self._train(job)
            except Exception:  # as in run_due: the round fails, the replay goes on
                WORKER.training_failures.labels(*window).inc()
                log.exception("training %s/%s failed", *window)
            WORKER.training_seconds.observe(time.perf_counter() - started)
        return outcomes

    def start(self, window: WindowKey) -> RoundJob | None:
        """When ``window`` is due now: mark it trained and return what its round trains on."""
        windows = self.ingestor.windows
        policy = self.ingestor.policy(window)
        now = self.clock()
        trigger = policy.due(now, windows.size(window))
        if trigger is None:
            return None
        drift_reason = policy.trained(now)
        WORKER.retrains.labels(*window, trigger).inc()
        return RoundJob(window, windows.copy(window), windows.clock, now, drift_reason)

    def _train(self, job: RoundJob) -> list[RoundOutcome]:
        return self.settle(job, fit_round(job, self.live, self.settings))

    def settle(self, job: RoundJob, outcomes: list[RoundOutcome]) -> list[RoundOutcome]:
        """Publish the promotions of ``job``'s round and make them live; returns the outcomes up to the first
        one the publisher refused. A drift-triggered round that promoted nothing leaves the drift to be answered
        again."""
        pool_key, target = job.window
        drift_reason = job.drift_reason
        settled = outcomes
        for index, outcome in enumerate(outcomes):
            labels = (pool_key, target, outcome.objective)
            if outcome.update is None:
                WORKER.rejections.labels(*labels).inc()
                log.info("rejected %s candidate over %d rows: %s", outcome.key, outcome.train_rows,
                         outcome.decision.reason)
                continue
            log.info("publishing %s v%d", outcome.key, outcome.update.version)  # logged before it can be committed
            try:
                self.publisher.publish(outcome.update)
            except PublishFenced as fenced:
                WORKER.publish_fenced.labels(*labels).inc()
                log.warning("not publishing %s v%d or the rest of its round: %s", outcome.key,
                            outcome.update.version, fenced)
                settled = outcomes[:index]
                break
            self.live.offer(live_model(outcome.update, outcome.booster))
            WORKER.promotions.labels(*labels).inc()
            WORKER.model_version.labels(*labels).set(outcome.update.version)
            WORKER.model_holdout_mape.labels(*labels).set(outcome.candidate.mape)
            log.info("promoted %s v%d over %d rows (%s; holdout MAE %.2f ms, MAPE %.1f%%, coverage %.2f)%s",
                     outcome.key, outcome.update.version, outcome.train_rows, outcome.decision.reason,
                     outcome.candidate.mae, 100 * outcome.candidate.mape, outcome.candidate.coverage,
                     f"; {drift_reason}" if drift_reason else "")
        if drift_reason is not None and not any(o.update for o in settled):
            self.ingestor.policy(job.window).unanswered(drift_reason)
        return settled


def fit_round(job: RoundJob, live: LiveModels, settings: PipelineSettings,
              samples: Samples | None = None) -> list[RoundOutcome]:
    """The candidates of ``job``'s window and the gate's decision on each (pure: nothing is published);
    ``samples`` are the job's when they were taken already (:func:`round_samples`)."""
    pool_key, target = job.window
    return train_round(pool_key, target, round_samples(job, settings) if samples is None else samples, live,
                       settings.train_params, settings.round_spec, now=job.now, drift_reason=job.drift_reason)


def round_samples(job: RoundJob, settings: PipelineSettings) -> Samples:
    """The training samples of ``job``: the window's live rows when it was due."""
    return snapshot(job.rows, job.window_clock, settings.limits)
