"""Replaying recorded arrivals through the simulator under several policies."""

import math
import statistics

import polars as pl
import pytest

from headroom.backtest.calibration import calibrate
from headroom.backtest.policies import REPLAYED, compare, met, requests_from
from tests.backtest.history import frame_of, simulated_records


@pytest.fixture(scope="module")
def history() -> pl.DataFrame:
    return frame_of(simulated_records(seconds=20.0))


def test_requests_keep_the_recorded_arrivals_lengths_and_slos(history):
    requests = requests_from(history)
    first = history.sort("arrival_ts").row(0, named=True)
    assert len(requests) == history.height
    assert requests[0].arrival_s == 0.0
    assert (requests[0].prompt_tokens, requests[0].output_tokens, requests[0].stream, requests[0].slo_ttft_ms) == (
        first["prompt_tokens"], first["output_tokens"], first["stream"], first["slo_ttft_ms"])
    assert all(r.prefix_hashes == () for r in requests)


def test_every_policy_completes_every_request_and_is_summarised(history):
    comparison = compare(history, ["round-robin", "least-queue", "composite"])
    summary, outcomes = comparison.summary, comparison.outcomes
    assert summary.get_column("policy").to_list() == ["recorded", REPLAYED, "round-robin", "least-queue", "composite"]
    assert summary.get_column("completed").to_list() == [history.height] * 5
    for row in summary.iter_rows(named=True):
        assert 0.0 <= row["slo_attainment"] <= 1.0
        assert row["ttft_p50_ms"] <= row["ttft_p99_ms"]
        assert math.isfinite(row["goodput_rps"]) and row["goodput_rps"] > 0
    assert outcomes.group_by("policy").len().get_column("len").to_list() == [history.height] * 5
    assert comparison.ranked and sorted(summary.get_column("rank").drop_nulls().to_list()) == [1, 2, 3]


def test_the_calibration_finds_the_recorded_slowdown_and_closes_the_gap(history):
    requests = requests_from(history)
    fitted = calibrate(history, requests, period_s=5.0)
    factors = {(r["server_id"], r["period_start_s"]): r["factor"] for r in fitted.factors.iter_rows(named=True)}
    late = [p for (_, p) in factors if p >= 12.0]  # the record's servers 0 and 1 slowed down 3x at 10 s
    assert all(factors[("server-0", p)] > 2.0 and factors[("server-1", p)] > 2.0 for p in late)
    assert all(factors[("server-2", p)] < 1.5 and factors[("server-3", p)] < 1.5 for p in late)
    assert all(0.67 < factors[(s, 0.0)] < 1.5 for s in ("server-0", "server-1", "server-2", "server-3"))
    uncalibrated = calibrate(history, requests, period_s=5.0, rounds=0)
    start = history.get_column("arrival_ts").min()
    slowed = history.filter(pl.col("server_id").is_in(["server-0", "server-1"]) & pl.col("stream")
                            & (pl.col("arrival_ts") - start >= 12.0))
    recorded = slowed.get_column("tpot_ms").median()

    def replayed(calibration):
        ids = set(slowed.get_column("request_id").to_list())
        return statistics.median(o.tpot_ms for o in calibration.replay.outcomes
                                 if o.request.request_id in ids and o.tpot_ms is not None)
    assert abs(math.log(replayed(fitted) / recorded)) < 0.2 < abs(math.log(replayed(uncalibrated) / recorded))
    assert fitted.to_scale


def test_policies_are_not_ranked_when_the_replay_is_far_from_the_record(history):
    slower_first_token = history.with_columns(  # queueing no server speed explains: TTFT 8x, TPOT as it was
        pl.when(pl.col("stream")).then(pl.col("ttft_ms") * 8).otherwise(pl.col("e2e_ms") * 8).alias("ttft_ms"))
    comparison = compare(slower_first_token, ["round-robin", "least-queue"])
    assert comparison.calibration is not None and comparison.calibration.worst_ratio > 1.5
    assert not comparison.ranked and "rank" not in comparison.summary.columns


def test_another_pool_size_is_neither_calibrated_nor_ranked(history):
    comparison = compare(history, ["round-robin"], servers=6)
    assert comparison.calibration is None and not comparison.ranked
    assert comparison.summary.get_column("policy").to_list() == ["recorded", "round-robin"]


def test_an_unknown_policy_is_named_in_the_error(history):
    with pytest.raises(ValueError, match="unknown policy 'fastest'"):
        compare(history, ["fastest"])


@pytest.mark.parametrize("ttft, tpot, slo_ttft, slo_tpot, expected", [
    (100.0, 10.0, None, None, True),
    (100.0, 10.0, 200.0, 20.0, True),
    (300.0, 10.0, 200.0, 20.0, False),
    (100.0, 30.0, 200.0, 20.0, False),
    (100.0, None, 200.0, 20.0, True),
], ids=["no-slo", "both-met", "ttft-missed", "tpot-missed", "no-tpot"])
def test_slo_met(ttft, tpot, slo_ttft, slo_tpot, expected):
    assert met(ttft, tpot, slo_ttft, slo_tpot) is expected
