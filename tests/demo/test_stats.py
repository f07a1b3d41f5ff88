import math

import pytest

from headroom.demo.load import ClientOutcome
from headroom.demo.stats import summarize


def outcome(i, **fields):
    base = dict(arm="headroom", request_id=f"r{i}", sent_at=float(i), status=200, stream=True, has_slo=False)
    base.update(fields)
    return ClientOutcome(**base)


def test_summary_counts_and_percentiles():
    outcomes = [outcome(i, ttft_ms=float(i + 1), tpot_ms=10.0, e2e_ms=100.0) for i in range(100)]
    outcomes += [outcome(100, status=429, has_slo=True), outcome(101, status=0, error="refused")]
    summary = summarize(outcomes, seconds=10.0)
    assert (summary.requests, summary.completed, summary.rejected, summary.failed) == (102, 100, 1, 1)
    assert summary.ttft_p50_ms == pytest.approx(50.5)
    assert summary.ttft_p99_ms == pytest.approx(99.01)
    assert summary.rate_per_s == pytest.approx(10.0)
    assert math.isnan(summary.slo_attainment)


def test_slo_attainment_and_goodput():
    outcomes = [outcome(0, has_slo=True, ttft_ms=5.0, slo_met=True),
                outcome(1, has_slo=True, ttft_ms=9000.0, slo_met=False),
                outcome(2, ttft_ms=7.0)]
    summary = summarize(outcomes, seconds=2.0)
    assert summary.slo_attainment == pytest.approx(0.5)
    assert summary.goodput_per_s == pytest.approx(1.0)
