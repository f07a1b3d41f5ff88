"""Joining the published versions with the records they served."""

import polars as pl

from headroom.backtest.published import live_error, served, updates_frame, usage
from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.model_update import make_update
from tests.backtest.history import VERSIONS, frame_of, simulated_records


def update(target: str, version: int, mae: float):
    return make_update(model=b"{}", version=version, pool_key="h100", target=target, objective="mean",
                       feature_schema=FEATURE_SCHEMA, model_format="json", created_at=1_700_000_000.0,
                       quantile=None, window_stats={"train_rows": 400}, holdout_metrics={"mae": mae, "mape": 0.1},
                       drift_reason=None)


def test_each_version_gets_the_error_of_the_records_that_used_it():
    records = frame_of(simulated_records(seconds=10.0))
    table = live_error(usage(records), updates_frame([update("ttft", 3, 12.5), update("ttft", 4, 9.0)]))
    ttft = table.filter(pl.col("target") == "ttft")
    streaming = records.filter(pl.col("stream"))
    assert ttft.get_column("version").to_list() == [3, 4]
    used = ttft.filter(pl.col("version") == VERSIONS["ttft"]).row(0, named=True)
    assert used["served_records"] == streaming.height
    assert abs(used["live_mae_ms"] - (streaming["ttft_ms"] - 40.0).abs().mean()) < 1e-9
    assert used["holdout_mae_ms"] == 12.5
    assert ttft.filter(pl.col("version") == 4)["served_records"].to_list() == [0]


def test_records_without_a_version_serve_no_model():
    records = frame_of(simulated_records(seconds=5.0)).with_columns(pl.lit(None).cast(
        pl.Struct({"ttft": pl.Int64, "tpot": pl.Int64, "e2e": pl.Int64})).alias("model_versions"))
    assert served(records).height == 0
