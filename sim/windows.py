"""Per-window attainment and p99 TTFT of a run, and the time a policy takes to recover after a change.

Both players of a scenario (:mod:`sim.scenario_play`, ``benchmarks/regime_live.py``) reduce each request to
``(time s, TTFT ms or None when not served, SLO met)``: the time it was sent, or in the live player the time it was
due, so that a client late by a few milliseconds cannot move a request to another window in one arm only. A request
counts in the window of that time; one not served counts as a miss. The time to recover is measured from the change
to the start of the first window from which a policy's attainment stays at or above a reference's in every later
window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

Row = tuple[float, float | None, bool]  # sent (or due) s, TTFT ms (None: not served), SLO met
WINDOW_S = 5.0


@dataclass(frozen=True)
class Window:
    start_s: float
    requests: int
    attainment: float  # NaN when no request was sent in the window
    ttft_p99_ms: float  # of the served requests; NaN when none


def windows(rows: Sequence[Row], duration_s: float, window_s: float = WINDOW_S) -> list[Window]:
    """Consecutive windows of ``window_s`` over ``[0, duration_s)``."""
    count = max(1, math.ceil(duration_s / window_s - 1e-9))
    buckets: list[list[Row]] = [[] for _ in range(count)]
    for row in rows:
        i = int(row[0] // window_s)
        if 0 <= i < count:
            buckets[i].append(row)
    return [Window(i * window_s, len(b), sum(r[2] for r in b) / len(b) if b else math.nan,
                   p99([r[1] for r in b if r[1] is not None])) for i, b in enumerate(buckets)]


def whole(rows: Sequence[Row], since_s: float = 0.0) -> tuple[float, float]:
    """Attainment and p99 TTFT of the requests sent at or after ``since_s``."""
    chosen = [r for r in rows if r[0] >= since_s]
    attained = sum(r[2] for r in chosen) / len(chosen) if chosen else math.nan
    return attained, p99([r[1] for r in chosen if r[1] is not None])


def recovery_s(mine: Sequence[Window], reference: Sequence[Window], change_at_s: float) -> float | None:
    """Seconds from the change to the start of the first window from which ``mine``'s attainment is at or
    above ``reference``'s in every window (0: never below); None when the last window is still below."""
    after = [(a, b) for a, b in zip(mine, reference) if a.start_s + 1e-9 >= change_at_s]
    start = None
    for a, b in reversed(after):
        if a.attainment < b.attainment:  # a NaN (no request) compares False: not below
            break
        start = a.start_s
    return None if start is None else start - change_at_s


def p99(values: Sequence[float]) -> float:
    return float(np.percentile(values, 99)) if len(values) else math.nan
