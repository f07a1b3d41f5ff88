"""The report directory: ``report.md``, PNG plots and every table as parquet."""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from headroom.backtest import plots
from headroom.backtest.replay import Range, Source
from headroom.backtest.result import Backtest
from headroom.backtest.scalars import number

if TYPE_CHECKING:
    from headroom.streams.settings import PipelineSettings

MAX_ROWS = 40  # rows of a long table shown in the Markdown (the parquet file has them all)
PREFIX_NOTE = ("Telemetry records carry no prompt prefix hashes, so the replayed requests share no cached "
               "prefixes: the comparison leaves prefix-cache effects out, while the recorded row includes them.")


def markdown_table(frame: pl.DataFrame, limit: int = MAX_ROWS) -> str:
    """A Markdown table of ``frame`` (numbers rounded), with a note when rows were left out."""
    if frame.width == 0:
        return "_(none)_\n"
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * frame.width]
    for row in frame.head(limit).iter_rows():
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    if frame.height > limit:
        lines.append(f"\n_{frame.height - limit} more rows in the parquet file._")
    if frame.height == 0:
        lines.append("\n_(none)_")
    return "\n".join(lines) + "\n"


def _cell(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.4g}" if abs(value) < 1e6 else f"{value:.0f}"
    return "" if value is None else str(value).replace("|", "\\|")


def write_report(out_dir: Path, result: Backtest, source: Source, pipeline: PipelineSettings) -> list[Path]:
    """Write every table, plot and the Markdown report into ``out_dir``; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pq = result.prequential
    tables = {"rounds": pq.rounds, "drifts": pq.drifts, "prequential_errors": pq.errors, "versions": pq.versions,
              "published_updates": result.updates, "published_live_error": result.live_error,
              "policy_summary": result.policy_summary, "policy_outcomes": result.policy_outcomes}
    if result.calibration is not None:
        tables |= {"calibration_factors": result.calibration.factors, "calibration_gap": result.calibration.gap}
    files = []
    for name, frame in tables.items():
        path = out_dir / f"{name}.parquet"
        frame.write_parquet(path)
        files.append(path)
    figures = [plots.error_over_time(pq.errors, pq.drifts, pq.rounds, out_dir / "error_over_time.png"),
               plots.latency_cdfs(result.policy_outcomes, out_dir / "latency_cdfs.png"),
               plots.predicted_vs_actual(pq.errors, out_dir / "predicted_vs_actual.png")]
    files += figures
    report = out_dir / "report.md"
    report.write_text(_markdown(result, source, pipeline))
    return [report, *files]


def _markdown(result: Backtest, source: Source, pipeline: PipelineSettings) -> str:
    pq = result.prequential
    span = ""
    if pq.records and pq.first_ts is not None and pq.last_ts is not None:
        first, last = pq.first_ts, pq.last_ts
        span = (f" completed between {_utc(first)} and {_utc(last)} ({last - first:.0f} s of event time)")
    promoted = pq.rounds.filter(pl.col("promoted")) if pq.rounds.height else pq.rounds
    rejected = pq.rounds.filter(~pl.col("promoted")) if pq.rounds.height else pq.rounds
    rng = source.span
    settings_rows = pl.DataFrame([{"setting": f.name, "value": str(getattr(pipeline, f.name))}
                                  for f in dataclasses.fields(pipeline)
                                  if f.name not in ("app_id", "metrics_port", "data_dir", "log_level",
                                                    "batch_records", "flush_records", "flush_interval_s")])
    timing = pl.DataFrame([{"stage": k, "seconds": v,
                            "records_per_s": pq.records / v if v > 0 and k in ("read", "prepare", "replay")
                            else float("nan")} for k, v in result.seconds.items()])
    parts = [
        "# Backtest report\n",
        f"Topic `{source.kafka.telemetry_topic}` at `{source.kafka.bootstrap_servers}`, {_describe(rng)}: "
        f"{pq.records} valid records{span}; {result.rejected} rejected by the validator.\n",
        "## Prequential evaluation\n",
        "The pipeline's own ingest, windows, drift detectors, retraining triggers, training rounds and promotion "
        "gate ran over the records in arrival order on event time, starting with no live model. Each promoted "
        "version is scored on the records of its window that arrived while it was the newest version.\n",
        f"{promoted.height} versions promoted, {rejected.height} candidates rejected, {pq.drifts.height} drift "
        f"detections.\n",
        "![error over time](error_over_time.png)\n",
        "### Versions and their error on later records\n",
        markdown_table(pq.versions.select(["pool_key", "target", "objective", "version", "promoted_ts",
                                           "trigger_drift", "scored_records", "mae_ms", "mape", "coverage"])
                       .with_columns(pl.col("promoted_ts").map_elements(_utc, return_dtype=pl.String))),
        "### Rejected candidates\n",
        markdown_table(rejected.select(["event_ts", "pool_key", "target", "objective", "reason", "train_rows"])
                       .with_columns(pl.col("event_ts").map_elements(_utc, return_dtype=pl.String))
                       if rejected.height else pl.DataFrame()),
        "### Drift events\n",
        markdown_table(pq.drifts.with_columns(pl.col("event_ts").map_elements(_utc, return_dtype=pl.String))
                       if pq.drifts.height else pl.DataFrame()),
        "![predicted vs actual](predicted_vs_actual.png)\n",
        "### Pipeline settings\n",
        markdown_table(settings_rows),
        "## Published history\n",
        f"`{source.kafka.model_topic}` holds {result.updates.height} versions signed by a trusted key"
        f"{_rejected_updates(result.rejected_updates)}. Live error: the records whose "
        "`model_versions` name the version, the prediction they carry against what happened.\n",
        markdown_table(result.live_error.select(["pool_key", "target", "version", "served_records", "live_mae_ms",
                                                 "live_mape", "holdout_mae_ms", "holdout_mape", "drift_reason"])),
        "## Policy comparison\n",
        f"The recorded arrivals (arrival times, prompt and output tokens, output caps, stream flags, SLOs, "
        f"priorities) replayed through the offline simulator. {PREFIX_NOTE} Goodput counts requests that met "
        "every SLO they stated, per second of the recorded span.\n",
        *_calibration(result),
        markdown_table(result.policy_summary),
        "![latency CDFs](latency_cdfs.png)\n",
        "## Timings\n",
        markdown_table(timing),
    ]
    return "\n".join(parts)


def _calibration(result: Backtest) -> list[str]:
    """The calibration line and whether the policies are ranked."""
    c = result.calibration
    if c is None:
        if result.policy_summary.height == 0:
            return []
        return ["**Not ranked**: the simulated pool is not the recorded one (a server count was given), so it "
                "was not calibrated to the record.\n"]
    moved = c.factors.filter((pl.col("factor") - 1.0).abs() > 0.05)
    slowest = number(c.factors.get_column("factor").max(), "the slowest calibration factor")
    lines = [f"Calibration: each server's speed per {c.factors.get_column('period_start_s').unique().len()} "
             f"period(s) was fitted to the recorded time per output token ({moved.height} of {c.factors.height} "
             f"server-periods moved by more than 5%; slowest factor {slowest:.2f}). "
             f"The recorded assignment, replayed through the calibrated simulator (`recorded, simulated`), "
             f"against the record:\n", markdown_table(c.gap)]
    if c.to_scale:
        lines.append(f"Within ×{c.tolerance:g} of the record on every line: the policies are ranked (`rank`: SLO "
                     f"attainment, then goodput, then TTFT p99).\n")
    else:
        lines.append(f"**Not ranked**: the replay is off by ×{c.worst_ratio:.2f} (tolerance ×{c.tolerance:g}), so "
                     f"the simulator does not reproduce what the recorded run met and the policies' numbers are "
                     f"not to scale with the recorded row.\n")
    return lines


def _describe(span: Range) -> str:
    parts = []
    if span.start_offset is not None:
        parts.append(f"from offset {span.start_offset} of every partition")
    if span.start_ms is not None:
        parts.append(f"from {_utc(span.start_ms / 1000)}")
    if span.end_ms is not None:
        parts.append(f"up to {_utc(span.end_ms / 1000)}")
    return " ".join(parts) or "whole history"


def _utc(ts: float | None) -> str:
    if ts is None or ts != ts:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + "Z"


def _rejected_updates(rejected: list[tuple[int, str]]) -> str:
    """`` and N rejected messages (reason: count, ...)``, or nothing."""
    if not rejected:
        return ""
    counts = Counter(reason for _, reason in rejected)
    return f" and {len(rejected)} rejected message(s) ({', '.join(f'{r}: {n}' for r, n in sorted(counts.items()))})"
