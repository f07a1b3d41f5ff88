"""Prequential evaluation: replay telemetry through the live pipeline's own code, on event time, and score
every promoted version on the records that arrive after it.

The replay builds the worker's objects exactly as ``headroom worker start`` does — one
:class:`~streams.ingest.Ingestor` (windows, strata, drift detectors fed with the residuals of the
predictions the router used) and one :class:`~streams.retrain.Retrainer` (triggers, training rounds,
promotion gate) from the same :class:`~streams.settings.PipelineSettings` — and feeds it the records in
arrival order. The differences are the clock — the retrainer reads event time (the newest completion
time seen) instead of wall time and is asked for due windows after every record, as a live worker whose
checks come faster than its records would — and the start: no live model (a worker warm-starts from
``model-updates``). Promoted versions are collected in memory, never published.

Each promoted version is then scored (test-then-train) on the records of its window that arrived while it
was the newest version of its key: from the record after its promotion to the next promotion.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import polars as pl

from headroom.contract.features import RAW_COLUMNS, feature_matrix
from headroom.contract.model_update import ModelUpdate
from headroom.contract.targets import OBSERVED, trains
from headroom.contract.telemetry import TelemetryRecord
from headroom.contract.telemetry_frame import COLUMNS
from headroom.streams.ingest import Ingestor, build_ingestor
from headroom.streams.retrain import Retrainer
from headroom.streams.settings import PipelineSettings
from headroom.trainer.evaluation import score
from headroom.trainer.fit import predict
from headroom.trainer.live import LiveModels
from headroom.trainer.rounds import RoundOutcome


class CollectingPublisher:
    """A publisher that keeps the updates (the retrainer's publishing edge, for replays)."""

    def __init__(self) -> None:
        self.updates: list[ModelUpdate] = []

    def owns(self, pool_key: str) -> bool:
        return True

    def publish(self, update: ModelUpdate) -> None:
        self.updates.append(update)


def pipeline_objects(settings: PipelineSettings) -> tuple[Ingestor, Retrainer, CollectingPublisher]:
    """The worker's ingestor and retrainer built from ``settings``, with the retrainer on event time."""
    ingestor = build_ingestor(settings)
    publisher = CollectingPublisher()
    retrainer = Retrainer(ingestor, LiveModels(), publisher, settings, clock=lambda: ingestor.windows.clock)
    return ingestor, retrainer, publisher


def arrival_order(records: pl.DataFrame) -> pl.DataFrame:
    """Records in the order a consumer meets them: offsets in order within a partition, partitions merged
    by the running maximum of their Kafka timestamps."""
    return (records.sort(["partition", "offset"])
            .with_columns(pl.col("kafka_ts_ms").cum_max().over("partition").alias("_merge_ts"))
            .sort(["_merge_ts", "partition", "offset"], maintain_order=True).drop("_merge_ts"))


def telemetry_records(records: pl.DataFrame) -> Iterator[tuple[TelemetryRecord, int, int]]:
    """``(record, partition, offset)`` for each row of a replay frame."""
    for row in records.select([*COLUMNS, "partition", "offset"]).iter_rows(named=True):
        versions = row["model_versions"]
        if versions is not None:
            row["model_versions"] = {k: v for k, v in versions.items() if v is not None}
        partition, offset = row.pop("partition"), row.pop("offset")
        yield TelemetryRecord(**row), partition, offset


@dataclass(frozen=True)
class Round:
    """One candidate's fate: promoted (with its version) or rejected, and why."""

    record_index: int  # the record after which the round ran
    event_ts: float
    pool_key: str
    target: str
    objective: str
    promoted: bool
    version: int | None
    reason: str
    drift_reason: str | None
    candidate_error: float
    live_error: float | None
    train_rows: int
    fit_seconds: float


@dataclass(frozen=True)
class Drift:
    record_index: int
    event_ts: float
    pool_key: str
    target: str
    reason: str


@dataclass(frozen=True)
class Prequential:
    rounds: pl.DataFrame  # one row per Round
    drifts: pl.DataFrame  # one row per Drift
    errors: pl.DataFrame  # per scored record: the then-newest version's prediction against the actual value
    versions: pl.DataFrame  # per promoted version: its error on the records it would have served
    records: int
    prepare_seconds: float  # the feature matrix and targets of every record, vectorised
    replay_seconds: float  # windows, detectors and triggers (per record, the live code)
    training_seconds: float  # inside training rounds
    scoring_seconds: float


def evaluate(records: pl.DataFrame, settings: PipelineSettings,
             progress: Callable[[int], None] | None = None) -> Prequential:
    """Run the pipeline over ``records`` (a :class:`backtest.replay.Replay` frame) and score its versions."""
    began = time.perf_counter()
    ordered = arrival_order(records)
    features, actual = prepare(ordered)
    prepare_seconds = time.perf_counter() - began
    ingestor, retrainer, _ = pipeline_objects(settings)
    rounds: list[Round] = []
    drifts: list[Drift] = []
    boosters: dict[tuple[str, str, str, int], object] = {}
    training = 0.0
    began = time.perf_counter()
    for index, (record, partition, offset) in enumerate(telemetry_records(ordered)):
        result = ingestor.ingest_record(record, partition, offset)
        for window in result.drifted:
            drifts.append(Drift(index, record.completion_ts, *window, ingestor.policy(window).drift_reason or ""))
        started = time.perf_counter()
        outcomes = retrainer.train_due()
        if outcomes:
            training += time.perf_counter() - started
            for outcome in outcomes:
                rounds.append(_round(index, ingestor.windows.clock, outcome))
                if outcome.update is not None:
                    u = outcome.update
                    boosters[(u.pool_key, u.target, u.objective, u.version)] = outcome.booster
        if progress and index % 1000 == 999:
            progress(1000)
    if progress:
        progress(ordered.height % 1000)
    replay_seconds = time.perf_counter() - began - training
    began = time.perf_counter()
    errors = _errors(ordered, features, actual, rounds, boosters)
    versions = _version_scores(rounds, errors, settings.quantile)
    return Prequential(rounds=_frame(rounds, Round), drifts=_frame(drifts, Drift), errors=errors,
                       versions=versions, records=ordered.height, prepare_seconds=prepare_seconds,
                       replay_seconds=replay_seconds,
                       training_seconds=training, scoring_seconds=time.perf_counter() - began)


def _round(index: int, event_ts: float, outcome: RoundOutcome) -> Round:
    pool_key, target, objective = outcome.key.rsplit("/", 2)
    update = outcome.update
    return Round(index, event_ts, pool_key, target, objective, update is not None,
                 None if update is None else update.version, outcome.decision.reason,
                 None if update is None else update.drift_reason, outcome.decision.candidate_error,
                 outcome.decision.live_error, outcome.train_rows, outcome.fit_seconds)


def _frame(items: list, cls: type) -> pl.DataFrame:
    names = list(cls.__dataclass_fields__)
    if not items:
        return pl.DataFrame(schema={n: _EMPTY_TYPES.get(n, pl.Float64) for n in names})
    return pl.DataFrame([vars(item) for item in items], infer_schema_length=None).select(names)


_EMPTY_TYPES = {"record_index": pl.Int64, "pool_key": pl.String, "target": pl.String, "objective": pl.String,
                "promoted": pl.Boolean, "version": pl.Int64, "reason": pl.String, "drift_reason": pl.String,
                "train_rows": pl.Int64}
_ERROR_SCHEMA = {"record_index": pl.Int64, "event_ts": pl.Float64, "pool_key": pl.String, "target": pl.String,
                 "objective": pl.String, "version": pl.Int64, "actual_ms": pl.Float64, "predicted_ms": pl.Float64}


def prepare(records: pl.DataFrame) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The feature matrix of every record and the observed value of each target (NaN where it trains none)."""
    features = feature_matrix({name: records.get_column(name).to_numpy() for name in RAW_COLUMNS})
    stream = records.get_column("stream").to_numpy()
    actual = {}
    for target, column in OBSERVED.items():
        values = records.get_column(column).fill_null(np.nan).to_numpy().astype(np.float64)
        actual[target] = np.where(trains(target, stream), values, np.nan)
    return features, actual


def _errors(ordered: pl.DataFrame, features: np.ndarray, actual: dict[str, np.ndarray], rounds: list[Round],
            boosters: dict) -> pl.DataFrame:
    """Each promoted version's predictions on the records of its window until the next version of its key."""
    if not boosters:
        return pl.DataFrame(schema=_ERROR_SCHEMA)
    pools = ordered.get_column("pool_key").to_numpy()
    times = ordered.get_column("completion_ts").to_numpy()
    promoted = [r for r in rounds if r.promoted]
    parts = []
    for i, r in enumerate(promoted):
        later = [p.record_index for p in promoted[i + 1:]
                 if (p.pool_key, p.target, p.objective) == (r.pool_key, r.target, r.objective)]
        end = later[0] + 1 if later else len(times)
        span = np.arange(r.record_index + 1, end)
        span = span[(pools[span] == r.pool_key) & ~np.isnan(actual[r.target][span])]
        if len(span) == 0:
            continue
        predicted = predict(boosters[(r.pool_key, r.target, r.objective, r.version)], features[span])
        parts.append(pl.DataFrame({
            "record_index": span, "event_ts": times[span], "pool_key": r.pool_key, "target": r.target,
            "objective": r.objective, "version": r.version, "actual_ms": actual[r.target][span],
            "predicted_ms": predicted.astype(np.float64)}, schema=_ERROR_SCHEMA))
    return pl.concat(parts).sort("record_index") if parts else pl.DataFrame(schema=_ERROR_SCHEMA)


def _version_scores(rounds: list[Round], errors: pl.DataFrame, quantile: float) -> pl.DataFrame:
    rows = []
    for r in (r for r in rounds if r.promoted):
        mine = errors.filter((pl.col("pool_key") == r.pool_key) & (pl.col("target") == r.target)
                             & (pl.col("objective") == r.objective) & (pl.col("version") == r.version))
        m = score(mine.get_column("actual_ms").to_numpy(), mine.get_column("predicted_ms").to_numpy(), quantile)
        rows.append({"pool_key": r.pool_key, "target": r.target, "objective": r.objective, "version": r.version,
                     "promoted_ts": r.event_ts, "promoted_after_record": r.record_index,
                     "trigger_drift": r.drift_reason,
                     "scored_records": m.rows, "mae_ms": m.mae, "mape": m.mape, "pinball_ms": m.pinball,
                     "coverage": m.coverage})
    schema = {"pool_key": pl.String, "target": pl.String, "objective": pl.String, "version": pl.Int64,
              "promoted_ts": pl.Float64, "promoted_after_record": pl.Int64, "trigger_drift": pl.String,
              "scored_records": pl.Int64, "mae_ms": pl.Float64, "mape": pl.Float64, "pinball_ms": pl.Float64,
              "coverage": pl.Float64}
    return pl.DataFrame(rows, schema=schema)
