"""Summaries of load outcomes over a sliding window or a whole run (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headroom.demo.load import ClientOutcome


@dataclass(frozen=True)
class Summary:
    requests: int
    completed: int
    rejected: int  # 429: shed by the SLO admitter
    failed: int  # anything else that did not complete
    rate_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float
    slo_attainment: float  # of the completed requests with SLO headers, the share that met them
    goodput_per_s: float  # completed requests per second that met their SLO (or had none)


def summarize(outcomes: Sequence[ClientOutcome], seconds: float) -> Summary:
    done = [o for o in outcomes if o.status == 200 and o.ttft_ms is not None]
    ttft = np.array([o.ttft_ms for o in done if o.stream]) if done else np.array([])
    tpot = np.array([o.tpot_ms for o in done if o.tpot_ms is not None])
    judged = [o.slo_met for o in done if o.slo_met is not None]
    good = sum(1 for o in done if o.slo_met is not False)
    seconds = max(seconds, 1e-9)
    return Summary(
        requests=len(outcomes), completed=len(done), rejected=sum(o.status == 429 for o in outcomes),
        failed=sum(o.status not in (200, 429) or (o.status == 200 and o.ttft_ms is None) for o in outcomes),
        rate_per_s=len(done) / seconds,
        ttft_p50_ms=_pct(ttft, 50), ttft_p99_ms=_pct(ttft, 99), tpot_p50_ms=_pct(tpot, 50),
        tpot_p99_ms=_pct(tpot, 99),
        slo_attainment=sum(judged) / len(judged) if judged else float("nan"),
        goodput_per_s=good / seconds)


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if values.size else float("nan")
