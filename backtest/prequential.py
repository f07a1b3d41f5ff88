"""Prequential evaluation: replay telemetry through the live pipeline's own code, on event time, and score
every promoted version on the records that arrive after it.

Each pool is replayed on its own, as a worker that owned only that pool would live through it: the
worker's objects built exactly as ``headroom worker start`` builds them — one
:class:`~streams.ingest.Ingestor` (windows, strata, drift detectors fed with the residuals of the
predictions the router used) and one :class:`~streams.retrain.Retrainer` (triggers, training rounds,
promotion gate) from the same :class:`~streams.settings.PipelineSettings` — fed the pool's records in
arrival order. The differences from a live worker are the clock — the retrainer reads event time (the
newest completion time of the pool's records) instead of wall time and is asked for due windows after
every record, as a live worker whose checks come faster than its records would — and the start: no live
model (a worker warm-starts from ``model-updates``). So a pool's results depend on its own records only,
never on which other pools were replayed beside it, by which process or which backtest worker
(:mod:`backtest.group`). Rounds are fitted by :class:`~backtest.round_pool.RoundPool` (in worker processes
when asked), with the results of the serial replay. Promoted versions are collected in memory, never
published.

Each promoted version is then scored (test-then-train) on the records of its pool that arrived while it
was the newest version of its key: from the record after its promotion to the next promotion.

Records, rounds and drifts are named by their pool and ``pool_record``, the record's index among its
pool's records in arrival order, beside its telemetry partition and offset.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import polars as pl
import xgboost as xgb

from headroom.backtest.round_pool import RoundPool, Started
from headroom.backtest.scalars import column_max, column_min
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

Boosters = dict[tuple[str, str, str, int | None], xgb.Booster]  # promoted: by pool key, target, objective, version


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

    pool_key: str
    round: int  # the pool's training rounds, counted from 0 in the order they started
    pool_record: int  # the record after which the round started, among its pool's records in arrival order
    partition: int  # and that record's telemetry partition and offset
    offset: int
    event_ts: float
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
    pool_key: str
    pool_record: int
    partition: int
    offset: int
    event_ts: float
    target: str
    reason: str


@dataclass(frozen=True)
class Prequential:
    rounds: pl.DataFrame  # one row per Round, by pool key and round
    drifts: pl.DataFrame  # one row per Drift, by pool key and record
    errors: pl.DataFrame  # per scored record: the then-newest version's prediction against the actual value
    versions: pl.DataFrame  # per promoted version: its error on the records it would have served
    records: int
    first_ts: float | None  # the earliest and latest completion times of the records
    last_ts: float | None
    prepare_seconds: float  # arrival order, the feature matrix and targets of every record, vectorised
    replay_seconds: float  # windows, detectors and triggers (per record, the live code)
    training_seconds: float  # this process spent fitting rounds, or waiting for the processes fitting them
    training_cpu_seconds: float  # fitting rounds, in every process
    scoring_seconds: float


@dataclass(frozen=True)
class _Site:
    """The record after which rounds started."""

    pool_record: int
    partition: int
    offset: int
    event_ts: float


@dataclass(frozen=True)
class _PoolReplay:
    pool_key: str
    records: pl.DataFrame  # in arrival order


class Progress(Protocol):
    """What a replay tells as it goes (all optional to act on)."""

    def replayed(self, records: int) -> None: ...

    def round_started(self, records_replayed: int) -> None: ...

    def round_settled(self) -> None: ...


def evaluate(records: pl.DataFrame, settings: PipelineSettings, progress: Progress | None = None,
             processes: int = 1) -> Prequential:
    """Run the pipeline over ``records`` (a :class:`backtest.replay.Replay` frame), pool by pool, fitting rounds
    in ``processes`` processes, and score the versions it promoted."""
    began = time.perf_counter()
    pools = [_PoolReplay(pool_key, arrival_order(part))
             for (pool_key,), part in records.partition_by("pool_key", as_dict=True, maintain_order=True).items()]
    pools.sort(key=lambda pool: pool.pool_key)
    prepared = {pool.pool_key: prepare(pool.records) for pool in pools}
    prepare_seconds = time.perf_counter() - began
    rounds: list[Round] = []
    drifts: list[Drift] = []
    boosters: Boosters = {}
    replayed = 0

    def settled(started: Started, outcomes: list[RoundOutcome]) -> None:
        for outcome in outcomes:
            rounds.append(_round(started.number, started.site, outcome))
            if outcome.update is not None and outcome.booster is not None:
                u = outcome.update
                boosters[(u.pool_key, u.target, u.objective, u.version)] = outcome.booster
        if progress:
            progress.round_settled()

    began = time.perf_counter()
    with RoundPool(settings, processes, settled) as pool_of_rounds:
        for pool in pools:
            ingestor, retrainer, _ = pipeline_objects(settings)
            for index, (record, partition, offset) in enumerate(telemetry_records(pool.records)):
                result = ingestor.ingest_record(record, partition, offset)
                for window in result.drifted:
                    drifts.append(Drift(pool.pool_key, index, partition, offset, record.completion_ts, window[1],
                                        ingestor.policy(window).drift_reason or ""))
                started = pool_of_rounds.train_due(retrainer, _Site(index, partition, offset, ingestor.windows.clock))
                if progress:
                    for _ in range(started):
                        progress.round_started(replayed + index + 1)
                    if index % 1000 == 999:
                        progress.replayed(1000)
            replayed += pool.records.height
            if progress:
                progress.replayed(pool.records.height % 1000)
        pool_of_rounds.finish()
        training, training_cpu = pool_of_rounds.waited_seconds, pool_of_rounds.cpu_seconds
    replay_seconds = time.perf_counter() - began - training
    began = time.perf_counter()
    rounds.sort(key=lambda r: (r.pool_key, r.round))  # settled rounds of different windows come in any order
    errors = pl.concat([_errors(pool, *prepared[pool.pool_key], rounds, boosters) for pool in pools]
                       + [pl.DataFrame(schema=_ERROR_SCHEMA)])
    versions = _version_scores(rounds, errors, settings.quantile)
    return Prequential(rounds=_frame(rounds, Round),
                       drifts=_frame(drifts, Drift), errors=errors, versions=versions, records=records.height,
                       first_ts=column_min(records, "completion_ts"), last_ts=column_max(records, "completion_ts"),
                       prepare_seconds=prepare_seconds, replay_seconds=replay_seconds, training_seconds=training,
                       training_cpu_seconds=training_cpu, scoring_seconds=time.perf_counter() - began)


def _round(number: int, site: _Site, outcome: RoundOutcome) -> Round:
    pool_key, target, objective = outcome.key.rsplit("/", 2)
    update = outcome.update
    return Round(pool_key, number, site.pool_record, site.partition, site.offset, site.event_ts, target,
                 objective, update is not None, None if update is None else update.version, outcome.decision.reason,
                 None if update is None else update.drift_reason, outcome.decision.candidate_error,
                 outcome.decision.live_error, outcome.train_rows, outcome.fit_seconds)


def _frame(items: list[Round] | list[Drift], cls: type[Round | Drift]) -> pl.DataFrame:
    names = [f.name for f in dataclasses.fields(cls)]
    if not items:
        return pl.DataFrame(schema={n: _EMPTY_TYPES.get(n, pl.Float64) for n in names})
    return pl.DataFrame([vars(item) for item in items], infer_schema_length=None).select(names)


_EMPTY_TYPES = {"pool_key": pl.String, "round": pl.Int64, "pool_record": pl.Int64, "partition": pl.Int64,
                "offset": pl.Int64, "target": pl.String, "objective": pl.String, "promoted": pl.Boolean,
                "version": pl.Int64, "reason": pl.String, "drift_reason": pl.String, "train_rows": pl.Int64}
_ERROR_SCHEMA = {"pool_key": pl.String, "pool_record": pl.Int64, "partition": pl.Int64, "offset": pl.Int64,
                 "event_ts": pl.Float64, "target": pl.String, "objective": pl.String, "version": pl.Int64,
                 "actual_ms": pl.Float64, "predicted_ms": pl.Float64}


def prepare(records: pl.DataFrame) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The feature matrix of every record and the observed value of each target (NaN where it trains none)."""
    features = feature_matrix({name: records.get_column(name).to_numpy() for name in RAW_COLUMNS})
    stream = records.get_column("stream").to_numpy()
    actual = {}
    for target, column in OBSERVED.items():
        values = records.get_column(column).fill_null(np.nan).to_numpy().astype(np.float64)
        actual[target] = np.where(trains(target, stream), values, np.nan)
    return features, actual


def _errors(pool: _PoolReplay, features: np.ndarray, actual: dict[str, np.ndarray], rounds: list[Round],
            boosters: Boosters) -> pl.DataFrame:
    """Each promoted version of ``pool``'s predictions on the records it trains until the next version of its
    key (``rounds`` in the order they started)."""
    times = pool.records.get_column("completion_ts").to_numpy()
    partitions = pool.records.get_column("partition").to_numpy()
    offsets = pool.records.get_column("offset").to_numpy()
    promoted = [r for r in rounds if r.promoted and r.pool_key == pool.pool_key]
    parts = []
    for i, r in enumerate(promoted):
        later = [p.pool_record for p in promoted[i + 1:] if (p.target, p.objective) == (r.target, r.objective)]
        end = later[0] + 1 if later else len(times)
        span = np.arange(r.pool_record + 1, end)
        span = span[~np.isnan(actual[r.target][span])]
        if len(span) == 0:
            continue
        predicted = predict(boosters[(r.pool_key, r.target, r.objective, r.version)], features[span])
        parts.append(pl.DataFrame({
            "pool_key": r.pool_key, "pool_record": span, "partition": partitions[span], "offset": offsets[span],
            "event_ts": times[span], "target": r.target, "objective": r.objective, "version": r.version,
            "actual_ms": actual[r.target][span], "predicted_ms": predicted.astype(np.float64)}, schema=_ERROR_SCHEMA))
    if not parts:
        return pl.DataFrame(schema=_ERROR_SCHEMA)
    return pl.concat(parts).sort(["pool_record", "target", "objective"], maintain_order=True)


def _version_scores(rounds: list[Round], errors: pl.DataFrame, quantile: float) -> pl.DataFrame:
    rows = []
    for r in (r for r in rounds if r.promoted):
        mine = errors.filter((pl.col("pool_key") == r.pool_key) & (pl.col("target") == r.target)
                             & (pl.col("objective") == r.objective) & (pl.col("version") == r.version))
        m = score(mine.get_column("actual_ms").to_numpy(), mine.get_column("predicted_ms").to_numpy(), quantile)
        rows.append({"pool_key": r.pool_key, "target": r.target, "objective": r.objective, "version": r.version,
                     "promoted_ts": r.event_ts, "promoted_after_record": r.pool_record,
                     "trigger_drift": r.drift_reason,
                     "scored_records": m.rows, "mae_ms": m.mae, "mape": m.mape, "pinball_ms": m.pinball,
                     "coverage": m.coverage})
    schema = {"pool_key": pl.String, "target": pl.String, "objective": pl.String, "version": pl.Int64,
              "promoted_ts": pl.Float64, "promoted_after_record": pl.Int64, "trigger_drift": pl.String,
              "scored_records": pl.Int64, "mae_ms": pl.Float64, "mape": pl.Float64, "pinball_ms": pl.Float64,
              "coverage": pl.Float64}
    return pl.DataFrame(rows, schema=schema)
