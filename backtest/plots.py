"""The report's PNG plots (matplotlib, headless): error over time with drift markers, latency CDFs per
policy, predicted against actual."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from headroom.backtest.scalars import number
from headroom.trainer.drift import RELATIVE_ERROR_FLOOR_MS

ROLLING = 200  # records per point of the rolling error


def error_over_time(errors: pl.DataFrame, drifts: pl.DataFrame, rounds: pl.DataFrame, path: Path) -> Path:
    """Rolling relative error (clipped to 1, as the drift detectors see it) of the then-newest mean model per
    target, with drift detections and promotions marked."""
    fig, ax = plt.subplots(figsize=(10, 4.5))
    mean = errors.filter(pl.col("objective") == "mean")
    start = _start(errors, drifts)
    for (pool_key, target), part in mean.sort("event_ts").group_by(["pool_key", "target"], maintain_order=True):
        relative = ((part["actual_ms"] - part["predicted_ms"]).abs()
                    / part["actual_ms"].clip(lower_bound=RELATIVE_ERROR_FLOOR_MS)).clip(upper_bound=1.0)
        rolling = relative.rolling_mean(min(ROLLING, part.height), min_samples=1).to_numpy()
        ax.plot(part["event_ts"].to_numpy() - start, rolling, label=f"{pool_key}/{target}",
                marker="." if part.height < 2 else None)
    for i, ts in enumerate(drifts.get_column("event_ts").to_list()):
        ax.axvline(ts - start, color="red", linestyle="--", linewidth=0.8, label="drift" if i == 0 else None)
    promoted = rounds.filter(pl.col("promoted") & (pl.col("objective") == "mean"))
    if promoted.height:  # at the top edge, in axes coordinates: above the error lines, never off the axes
        ax.plot(promoted["event_ts"].to_numpy() - start, np.full(promoted.height, 0.97), "kv", markersize=6,
                transform=ax.get_xaxis_transform(), label="promotion")
    ax.set(xlabel="event time (s from first record)", ylabel=f"relative error, clipped (rolling {ROLLING})",
           title="Prequential error of the newest version")
    _legend(ax, loc="upper right")
    return _save(fig, path)


def latency_cdfs(outcomes: pl.DataFrame, path: Path) -> Path:
    """TTFT and TPOT CDFs, one line per policy."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, column in zip(axes, ("ttft_ms", "tpot_ms")):
        for (name,), part in outcomes.group_by(["policy"], maintain_order=True):
            values = np.sort(part.get_column(column).drop_nulls().to_numpy())
            if len(values):
                ax.plot(values, np.arange(1, len(values) + 1) / len(values), label=name)
        ax.set(xscale="log", xlabel=f"{column.removesuffix('_ms').upper()} (ms)", ylabel="fraction of requests")
        ax.grid(alpha=0.3)
        _legend(ax)
    fig.suptitle("Latency CDFs per policy")
    return _save(fig, path)


def predicted_vs_actual(errors: pl.DataFrame, path: Path, limit: int = 20_000) -> Path:
    """Prequential predictions against the observed values, one panel per target (mean models)."""
    mean = errors.filter(pl.col("objective") == "mean")
    targets = sorted(mean.get_column("target").unique().to_list()) or ["ttft"]
    fig, axes = plt.subplots(1, len(targets), figsize=(4.5 * len(targets), 4.5), squeeze=False)
    for ax, target in zip(axes[0], targets):
        part = mean.filter(pl.col("target") == target)
        if part.height > limit:
            part = part.sample(limit, seed=0)
        actual, predicted = part["actual_ms"].to_numpy(), part["predicted_ms"].to_numpy()
        ax.scatter(actual, predicted, s=3, alpha=0.3)
        if len(actual):
            low, high = max(min(actual.min(), predicted.min()), 1e-3), max(actual.max(), predicted.max())
            ax.plot([low, high], [low, high], "k--", linewidth=0.8)
            ax.set(xscale="log", yscale="log")
        ax.set(xlabel="actual (ms)", ylabel="predicted (ms)", title=target)
    fig.suptitle("Predicted vs actual (prequential, mean models)")
    return _save(fig, path)


def _legend(ax: Axes, loc: Literal["best", "upper right"] = "best") -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc=loc)


def _start(errors: pl.DataFrame, drifts: pl.DataFrame) -> float:
    times = [number(f.get_column("event_ts").min(), "the first event_ts") for f in (errors, drifts) if f.height]
    return min(times) if times else 0.0


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
