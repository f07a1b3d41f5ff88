"""What one backtest found: the records it read, the prequential evaluation, the published history and the
policy comparison, with the files of its report and the seconds each stage took."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from headroom.backtest.calibration import Calibration
from headroom.backtest.prequential import Prequential


@dataclass(frozen=True)
class Backtest:
    records: pl.DataFrame
    rejected: int
    prequential: Prequential
    updates: pl.DataFrame
    live_error: pl.DataFrame
    policy_summary: pl.DataFrame
    policy_outcomes: pl.DataFrame
    files: list[Path]
    seconds: dict[str, float]  # per stage: read, prepare, replay, training, scoring, published, policies, report
    calibration: Calibration | None = None  # of the policy comparison to the record
    rejected_updates: list[tuple[int, str]] = field(default_factory=list)  # (offset, reason) on the model topic
