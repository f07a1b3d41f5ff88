"""Replaying recorded arrivals through the simulator under several policies."""

import math

import polars as pl
import pytest

from headroom.backtest.policies import compare, met, requests_from
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
    summary, outcomes = compare(history, ["round-robin", "least-queue", "composite"])
    assert summary.get_column("policy").to_list() == ["recorded", "round-robin", "least-queue", "composite"]
    assert summary.get_column("completed").to_list() == [history.height] * 4
    for row in summary.iter_rows(named=True):
        assert 0.0 <= row["slo_attainment"] <= 1.0
        assert row["ttft_p50_ms"] <= row["ttft_p99_ms"]
        assert math.isfinite(row["goodput_rps"]) and row["goodput_rps"] > 0
    assert outcomes.group_by("policy").len().get_column("len").to_list() == [history.height] * 4


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
