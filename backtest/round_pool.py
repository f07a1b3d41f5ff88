"""A replay's training rounds in worker processes, with the results of a serial replay.

A replay (:mod:`backtest.prequential`) asks after every record which windows are due
(:meth:`RoundPool.train_due`). Each due window's round is started as the live worker starts it
(:meth:`streams.retrain.Retrainer.start`), its samples taken at once, and its pure step
(:func:`streams.retrain.fit_round`: candidates, holdout, gate) runs in a worker process while the replay reads
on. What an outcome changes is settled in the replaying process (:meth:`~streams.retrain.Retrainer.settle`),
so the results are those of the serial replay, whatever the timing:

- the rounds of one window run one after another, each with the live versions the rounds before it promoted;
- a drift-triggered round that promotes nothing makes its window due again after the cooldown: before the
  replay asks that window whether it is due at or past the first moment the answer could depend on it (its
  last training plus the shorter of the cooldown and the retraining interval), it waits for the round;
- rounds of different windows (pools, targets) share nothing else, so they run side by side.

With ``processes=1`` each round runs at once in the replaying process: the serial replay itself. At most
``ahead`` rounds wait or run at a time (their samples are held in memory).
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from headroom.streams.metrics import WORKER
from headroom.streams.retrain import Retrainer, RoundJob, fit_round, round_samples
from headroom.streams.settings import PipelineSettings
from headroom.streams.windows import WindowKey
from headroom.trainer.live import LiveModels
from headroom.trainer.rounds import RoundOutcome
from headroom.trainer.samples import Samples

log = logging.getLogger(__name__)


@dataclass
class Started:
    """A round started after a record of a replay: where, and what it trains on."""

    retrainer: Retrainer
    job: RoundJob
    number: int  # of the rounds ``retrainer`` started, from 0
    site: Any  # the replay's note of where it started, handed back when settled
    samples: Samples | None = None
    future: Future[Fitted] | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Fitted:
    outcomes: list[RoundOutcome]
    cpu_seconds: float  # of the process that fitted them


Settled = Callable[[Started, list[RoundOutcome]], None]


class RoundPool:
    """Training rounds of replays, fitted by ``processes`` worker processes (1: in this one); see the module
    docstring. ``on_settled`` hears of every round once it is settled, in the order each window started them."""

    def __init__(self, settings: PipelineSettings, processes: int, on_settled: Settled, ahead: int | None = None):
        if processes < 1:
            raise ValueError(f"training processes must be at least 1, got {processes}")
        self.settings = settings
        self.processes = processes
        self.on_settled = on_settled
        self.ahead = ahead or 4 * processes
        self.cpu_seconds = 0.0  # fitting rounds, in whichever process
        self.waited_seconds = 0.0  # this process spent fitting rounds or waiting for them
        self._chains: dict[tuple[int, WindowKey], deque[Started]] = {}
        self._pending = 0
        self._numbers: dict[int, int] = {}  # rounds started per retrainer
        self._executor = (ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("spawn"))
                          if processes > 1 else None)

    def __enter__(self) -> RoundPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def train_due(self, retrainer: Retrainer, site: Any) -> int:
        """Start the round of every window of ``retrainer`` that is due now and settle those that are done;
        returns how many started."""
        count = 0
        for window in retrainer.ingestor.windows.keys():
            if not retrainer.publisher.owns(window[0]):
                continue
            key = (id(retrainer), window)
            if key in self._chains and self._may_decide(retrainer, window, self._chains[key]):
                self._drain(key)
            job = retrainer.start(window)
            if job is None:
                continue
            number = self._numbers.get(id(retrainer), 0)
            self._numbers[id(retrainer)] = number + 1
            count += 1
            started = Started(retrainer, job, number, site, round_samples(job, self.settings))
            if self._executor is None:
                began = time.perf_counter()
                self._settle(started, functools.partial(_fit, job, started.samples, retrainer.live, self.settings))
                self.waited_seconds += time.perf_counter() - began
                continue
            chain = self._chains.setdefault(key, deque())
            chain.append(started)
            self._pending += 1
            if len(chain) == 1:
                self._submit(started)
        if self._executor is not None:
            self._collect(block=self._pending >= self.ahead)
        return count

    def finish(self) -> None:
        """Wait for every round started and settle it."""
        while self._chains:
            self._collect(block=True)

    def _may_decide(self, retrainer: Retrainer, window: WindowKey, chain: deque[Started]) -> bool:
        """Whether ``window``'s next due check could depend on a drift-triggered round still in ``chain``."""
        if not any(started.job.drift_reason is not None for started in chain):
            return False
        policy = retrainer.ingestor.policy(window)
        rule = policy.rule
        return policy.last_trained_at is None or \
            retrainer.clock() >= policy.last_trained_at + min(rule.drift_cooldown_s, rule.interval_s)

    def _submit(self, started: Started) -> None:
        assert self._executor is not None
        job = started.job._replace(rows={})  # the samples travel instead of the rows
        started.future = self._executor.submit(_fit, job, started.samples, _live_of(started.retrainer.live, job.window,
                                                                                     self.settings), self.settings)

    def _collect(self, block: bool) -> None:
        """Settle every round at the head of its window's chain that is done (waiting for one if ``block``)."""
        if block:
            heads = [chain[0].future for chain in self._chains.values() if chain[0].future is not None]
            began = time.perf_counter()
            wait(heads, return_when=FIRST_COMPLETED)
            self.waited_seconds += time.perf_counter() - began
        for key in list(self._chains):
            self._settle_done(key)

    def _drain(self, key: tuple[int, WindowKey]) -> None:
        began = time.perf_counter()
        while key in self._chains:
            head = self._chains[key][0].future
            assert head is not None
            wait([head])
            self._settle_done(key)
        self.waited_seconds += time.perf_counter() - began

    def _settle_done(self, key: tuple[int, WindowKey]) -> None:
        chain = self._chains[key]
        while chain and (future := chain[0].future) is not None and future.done():
            started = chain.popleft()
            self._pending -= 1
            self._settle(started, future.result)
            if chain:
                self._submit(chain[0])
        if not chain:
            del self._chains[key]

    def _settle(self, started: Started, fitted: Callable[[], Fitted]) -> None:
        try:
            result = fitted()
        except BrokenProcessPool:
            raise
        except Exception:  # as the worker's retrainer does: the round fails, the replay goes on
            WORKER.training_failures.labels(*started.job.window).inc()
            log.exception("training %s/%s failed", *started.job.window)
            return
        self.cpu_seconds += result.cpu_seconds
        self.on_settled(started, started.retrainer.settle(started.job, result.outcomes))


def _live_of(live: LiveModels, window: WindowKey, settings: PipelineSettings) -> LiveModels:
    """The live versions of ``window``'s models: all a round of it reads."""
    subset = LiveModels()
    for params in settings.train_params:
        held = live.get(*window, params.objective)
        if held is not None:
            subset.offer(held)
    return subset


def _fit(job: RoundJob, samples: Samples | None, live: LiveModels, settings: PipelineSettings) -> Fitted:
    began = time.process_time()
    outcomes = fit_round(job, live, settings, samples)
    return Fitted(outcomes, time.process_time() - began)
