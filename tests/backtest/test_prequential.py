"""The prequential evaluation on simulator history, without Kafka."""

import numpy as np
import polars as pl
import pytest

from headroom.backtest.prequential import arrival_order, evaluate
from tests.backtest.history import frame_of, quick_settings, simulated_records


@pytest.fixture(scope="module")
def history() -> pl.DataFrame:
    return frame_of(simulated_records())


@pytest.fixture(scope="module")
def outcome(history):
    return evaluate(history, quick_settings())


def test_versions_grow_one_by_one_per_model_key(outcome):
    promoted = outcome.rounds.filter(pl.col("promoted"))
    assert promoted.height >= 6 * 2  # first and periodic rounds of every target, both objectives
    for _, part in promoted.group_by(["pool_key", "target", "objective"]):
        assert part.get_column("version").to_list() == list(range(1, part.height + 1))


def test_the_slowdown_is_detected_as_drift(outcome, history):
    assert outcome.drifts.height >= 1
    half_way = history.get_column("completion_ts").min() + 40.0
    assert outcome.drifts.get_column("event_ts").max() > half_way


def test_rejections_carry_the_gate_reason(outcome):
    rejected = outcome.rounds.filter(~pl.col("promoted"))
    assert rejected.get_column("version").null_count() == rejected.height
    assert all(" > live " in reason for reason in rejected.get_column("reason"))


def test_each_version_is_scored_only_after_its_promotion(outcome):
    promoted = outcome.rounds.filter(pl.col("promoted")).select(
        "pool_key", "target", "objective", "version", pl.col("pool_record").alias("promoted_at"))
    joined = outcome.errors.join(promoted, on=["pool_key", "target", "objective", "version"])
    assert joined.height == outcome.errors.height > 0
    assert (joined["pool_record"] > joined["promoted_at"]).all()
    assert np.isfinite(outcome.versions.filter(pl.col("scored_records") > 0)["mae_ms"].to_numpy()).all()


def test_replaying_twice_promotes_the_same_versions(history, outcome):
    again = evaluate(history, quick_settings())
    columns = ["pool_record", "pool_key", "target", "objective", "promoted", "version", "reason"]
    assert again.rounds.select(columns).equals(outcome.rounds.select(columns))


def test_arrival_order_keeps_offsets_in_order_within_a_partition():
    frame = pl.DataFrame({"partition": [0, 0, 1, 1], "offset": [0, 1, 0, 1], "kafka_ts_ms": [10, 5, 7, 20]})
    ordered = arrival_order(frame)
    assert ordered.select("partition", "offset").rows() == [(1, 0), (0, 0), (0, 1), (1, 1)]


def test_rounds_fitted_in_worker_processes_give_the_serial_results(history, outcome):
    parallel = evaluate(history, quick_settings(), processes=2)
    assert parallel.rounds.drop("fit_seconds").equals(outcome.rounds.drop("fit_seconds"))
    assert parallel.drifts.equals(outcome.drifts)
    assert parallel.errors.equals(outcome.errors)
    assert parallel.versions.equals(outcome.versions)
    assert parallel.rounds.filter(pl.col("drift_reason").is_not_null()).height > 0  # drift rounds were settled too


def test_a_pools_results_do_not_depend_on_the_pools_replayed_beside_it(history, outcome):
    other = frame_of(simulated_records(seconds=40.0, seed=2)).with_columns(
        pl.lit("a100").alias("pool_key"), pl.lit(1, pl.Int32).alias("partition"))
    both = evaluate(pl.concat([history, other]).sort("completion_ts"), quick_settings())
    assert set(both.rounds.get_column("pool_key")) == {"a100", "h100"}
    mine = pl.col("pool_key") == "h100"
    assert both.rounds.filter(mine).drop("fit_seconds").equals(outcome.rounds.drop("fit_seconds"))
    assert both.errors.filter(mine).equals(outcome.errors)
    assert both.versions.filter(mine).equals(outcome.versions)
