"""One backtest from topic to report: replay, prequential evaluation, published history, policy comparison.

Each stage is timed on its own, so reading and preparing records can be told apart from training. The terminal
shows each stage's progress with an estimate of the time left (the training rounds' total is estimated from
how many started per record replayed so far, and exact once the replay is done); the bars go when the backtest
ends, so a failure leaves one line.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import polars as pl
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from headroom.backtest import group, policies, published
from headroom.backtest.prequential import evaluate
from headroom.backtest.replay import Range, Source, read_telemetry
from headroom.backtest.report import write_report
from headroom.backtest.result import Backtest
from headroom.backtest.settings import BacktestSettings
from headroom.contract.model_update import ModelUpdate
from headroom.contract.signing import TrustedKeys
from headroom.contract.topics import KafkaSettings
from headroom.predictor.runtime import ModelRuntime
from headroom.router.framework.predictors import EmbeddedPredictor
from headroom.router.framework.roles import LatencyPredictor
from headroom.streams.settings import PipelineSettings


def run_backtest(source: Source, pipeline: PipelineSettings, settings: BacktestSettings,
                 console: Console | None = None) -> Backtest:
    unknown = [name for name in settings.policy_names if name not in policies.KNOWN_POLICIES]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}; known: {', '.join(policies.KNOWN_POLICIES)}")
    console = console or Console(stderr=True)
    seconds: dict[str, float] = {}
    with _progress(console) as progress:
        reading = progress.add_task(f"reading {source.kafka.telemetry_topic}", total=None)
        replay = read_telemetry(source.kafka, source.kafka.telemetry_topic, source.span,
                                source.extra, progress=lambda n: progress.advance(reading, n),
                                on_total=lambda n: progress.update(reading, total=n))
        progress.update(reading, total=replay.read, completed=replay.read)
        seconds["read"] = replay.seconds
        records = replay.records

        outcome = evaluate(records, pipeline, ReplayProgress(progress, records.height),
                           processes=settings.training_processes)
        seconds |= {"prepare": outcome.prepare_seconds, "replay": outcome.replay_seconds,
                    "training": outcome.training_seconds, "scoring": outcome.scoring_seconds}

        started = time.perf_counter()
        updates, rejected_updates = published.read_updates(source.kafka, source.trust, source.extra)
        updates_table = published.updates_frame(updates)
        live = published.live_error(published.usage(records), updates_table)
        seconds["published"] = time.perf_counter() - started

        names = settings.policy_names
        started = time.perf_counter()
        simulating = progress.add_task("policy comparison", total=len(names))
        if names and records.height:
            predictor = _published_models(updates, source.trust) if policies.PREDICTED in names else None
            if predictor is None and policies.PREDICTED in names:  # nothing published yet: nothing to replay it with
                names = [name for name in names if name != policies.PREDICTED]
            comparison = policies.compare(records, names, settings.servers or None, settings.server_type,
                                          settings.seed, progress=lambda _: progress.advance(simulating),
                                          predictor=predictor, period_s=settings.calibration_period_s,
                                          tolerance=settings.calibration_tolerance)
            summary, outcomes, calibration = comparison.summary, comparison.outcomes, comparison.calibration
        else:
            summary, outcomes, calibration = pl.DataFrame(), pl.DataFrame(schema=policies.OUTCOME_SCHEMA), None
        seconds["policies"] = time.perf_counter() - started

    started = time.perf_counter()
    result = Backtest(records, len(replay.rejected), outcome, updates_table, live, summary, outcomes, [], seconds,
                      calibration, rejected_updates)
    files = write_report(settings.out_dir, result, source, pipeline)
    seconds["report"] = time.perf_counter() - started
    return dataclasses.replace(result, files=files)


def _published_models(updates: list[ModelUpdate], trust: TrustedKeys) -> LatencyPredictor | None:
    """The latest published version of every model (already opened with ``trust``), verified as a serving
    runtime would."""
    runtime = ModelRuntime(trust=trust)
    for update in sorted(updates, key=lambda u: u.version):
        runtime.apply_update(update)
    return EmbeddedPredictor(runtime) if runtime.ready else None


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=True)


class ReplayProgress:
    """The replay's and the training rounds' bars (:class:`backtest.prequential.Progress`)."""

    def __init__(self, progress: Progress, records: int):
        self.progress = progress
        self.records = records
        self.replay: TaskID = progress.add_task("replay: windows, drift, triggers", total=records)
        self.training: TaskID = progress.add_task("training rounds (total estimated)", total=None)
        self.started = 0
        self.done = 0

    def replayed(self, records: int) -> None:
        self.done += records
        self.progress.advance(self.replay, records)
        if self.done >= self.records:
            self.progress.update(self.training, total=self.started, description="training rounds")

    def round_started(self, records_replayed: int) -> None:
        self.started += 1
        estimate = round(self.started * self.records / max(records_replayed, 1))
        self.progress.update(self.training, total=max(estimate, self.started))

    def round_settled(self) -> None:
        self.progress.advance(self.training, 1)


def report_parts(parts_dir: Path, kafka: KafkaSettings, trust: TrustedKeys, pipeline: PipelineSettings,
                 settings: BacktestSettings, extra: dict[str, str] | None = None) -> Backtest:
    """The report of a backtest split across workers (:mod:`backtest.group`): their parts merged, with the
    published history. The policy comparison simulates the whole recorded pool at once, so it is not split: run
    ``headroom backtest run --policies ...`` over a range for it."""
    started = time.perf_counter()
    merged = group.merge(group.read_parts(parts_dir))
    start_ms, end_ms, start_offset = merged.meta["span"]
    span = Range(start_ms, end_ms, start_offset)
    if merged.meta["settings"] != group.describe_settings(pipeline, span):
        raise group.SplitError(f"the parts were made with other pipeline settings than these: "
                               f"{merged.meta['settings']}")
    kafka = dataclasses.replace(kafka, telemetry_topic=merged.meta["topic"])
    source = Source(kafka, trust, span, extra or {})
    seconds = {k: v for k, v in merged.seconds.items() if k != "training_cpu"} | {"merge": time.perf_counter() - started}
    started = time.perf_counter()
    updates, rejected_updates = published.read_updates(kafka, trust, extra)
    updates_table = published.updates_frame(updates)
    live = published.live_error(merged.usage, updates_table)
    seconds["published"] = time.perf_counter() - started
    started = time.perf_counter()
    result = Backtest(pl.DataFrame(), merged.rejected, merged.prequential, updates_table, live, pl.DataFrame(),
                      pl.DataFrame(schema=policies.OUTCOME_SCHEMA), [], seconds, None, rejected_updates)
    files = write_report(settings.out_dir, result, source, pipeline)
    seconds["report"] = time.perf_counter() - started
    return dataclasses.replace(result, files=files)
