"""The published history: the versions on ``model-updates`` and the live error of each on the records it served.

A telemetry record names, per target, the version of the model whose prediction the router used
(``model_versions``) beside that prediction; joined with the published updates (the mean model of the
record's pool key and target) this gives each version's error in service next to its holdout error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from headroom.backtest.replay import LIBRDKAFKA_LOG
from headroom.contract.model_update import ModelUpdate
from headroom.contract.signing import TrustedKeys
from headroom.contract.targets import OBSERVED, PREDICTED, TARGETS, trains
from headroom.contract.topics import KafkaSettings
from headroom.model_topic import read_all

UPDATE_SCHEMA = {"offset": pl.Int64, "pool_key": pl.String, "target": pl.String, "objective": pl.String,
                 "version": pl.Int64, "created_at": pl.Float64, "holdout_mae_ms": pl.Float64,
                 "holdout_mape": pl.Float64, "train_rows": pl.Float64, "drift_reason": pl.String,
                 "signer": pl.String}


def read_updates(kafka: KafkaSettings, trust: TrustedKeys, options: Mapping[str, Any] | None = None
                 ) -> tuple[list[ModelUpdate], list[tuple[int, str]]]:
    """Every valid update signed by a key of ``trust`` on the model topic in offset order, and
    ``(offset, reason)`` of the rejected ones (unsigned, unknown key, forged, invalid)."""
    messages = sorted(read_all(kafka, trust, options={"logger": LIBRDKAFKA_LOG, **(options or {})}),
                      key=lambda item: item.offset)
    return ([item.update for item in messages if item.update is not None],
            [(item.offset, item.reason or "") for item in messages if item.update is None])


def updates_frame(updates: list[ModelUpdate]) -> pl.DataFrame:
    return pl.DataFrame([{"offset": i, "pool_key": u.pool_key, "target": u.target, "objective": u.objective,
                          "version": u.version, "created_at": u.created_at,
                          "holdout_mae_ms": u.holdout_metrics.get("mae"), "holdout_mape": u.holdout_metrics.get("mape"),
                          "train_rows": u.window_stats.get("train_rows"), "drift_reason": u.drift_reason,
                          "signer": u.signer}
                         for i, u in enumerate(updates)], schema=UPDATE_SCHEMA)


def served(records: pl.DataFrame) -> pl.DataFrame:
    """One row per (record, target) whose prediction came from a named version: actual against predicted.

    A record counts for the targets it trains (:func:`contract.targets.trains`): TTFT and TPOT when
    streaming, E2E otherwise — the residuals the drift detectors see.
    """
    parts = [records.filter(trains(target, pl.col("stream"))
                            & pl.col("model_versions").struct.field(target).is_not_null()
                            & pl.col(PREDICTED[target]).is_not_null() & pl.col(OBSERVED[target]).is_not_null())
             .select(pl.col("completion_ts"), pl.col("pool_key"), pl.lit(target).alias("target"),
                     pl.col("model_versions").struct.field(target).alias("version"),
                     pl.col(OBSERVED[target]).alias("actual_ms"), pl.col(PREDICTED[target]).alias("predicted_ms"))
             for target in TARGETS]
    return pl.concat(parts) if records.height else pl.DataFrame(
        schema={"completion_ts": pl.Float64, "pool_key": pl.String, "target": pl.String, "version": pl.Int64,
                "actual_ms": pl.Float64, "predicted_ms": pl.Float64})


def usage(records: pl.DataFrame) -> pl.DataFrame:
    """Per (pool key, target, version): records served, live MAE and MAPE, first and last served (of pools whose
    records are all in ``records``: so parts of a history by pool concatenate)."""
    return (served(records)
            .with_columns((pl.col("actual_ms") - pl.col("predicted_ms")).abs().alias("abs_error"))
            .group_by(["pool_key", "target", "version"])
            .agg(pl.len().alias("served_records"), pl.col("abs_error").mean().alias("live_mae_ms"),
                 (pl.col("abs_error") / pl.col("actual_ms").clip(lower_bound=1.0)).mean().alias("live_mape"),
                 pl.col("completion_ts").min().alias("first_served"),
                 pl.col("completion_ts").max().alias("last_served")))


def live_error(usage: pl.DataFrame, updates: pl.DataFrame) -> pl.DataFrame:
    """The :func:`usage` of each version beside its published holdout error."""
    mean_models = updates.filter(pl.col("objective") == "mean").drop("objective", "offset")
    return (usage.join(mean_models, on=["pool_key", "target", "version"], how="full", coalesce=True)
            .with_columns(pl.col("served_records").fill_null(0))
            .sort(["pool_key", "target", "version"]))
