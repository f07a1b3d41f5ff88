"""The demo report's PNG plots (matplotlib, headless).

- ``timeline.png``, on one time axis: TTFT p50 / p99 of streaming requests and SLO attainment per
  5-second window for both arms; below them how headroom's router corrected each server's TTFT and TPOT
  predictions (what it learned from the completions between model versions), and the version of every mean
  model headroom's worker had promoted, with each drift detection named by the model that drifted; the warm-up
  is shaded and the regime change marked in each panel.
- ``predicted_vs_actual.png``: the prediction headroom's router used for each request against what happened
  (TTFT of streams, E2E otherwise), before and after the regime change.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from headroom.demo.report import Evidence
from headroom.demo.stats import summarize

WINDOW_S = 5.0
ARM_COLORS = {"headroom": "tab:blue", "baseline": "tab:orange"}


def draw(evidence: Evidence, change_at: float, warmup_s: float, directory: Path) -> dict[str, Path]:
    """Every plot there is data for, by title."""
    figures = {}
    if evidence.outcomes:
        figures["latency, SLO attainment, model versions and drift over time"] = timeline(
            evidence, change_at, warmup_s, directory / "timeline.png")
    if evidence.telemetry is not None and evidence.telemetry.height:
        figures["predicted vs actual"] = predicted_vs_actual(evidence, change_at, directory / "predicted_vs_actual.png")
    return figures


def timeline(evidence: Evidence, change_at: float, warmup_s: float, path: Path) -> Path:
    fig, (latency, slo, corrections, models) = plt.subplots(4, 1, figsize=(11, 12), sharex=True,
                                                            gridspec_kw={"height_ratios": [3, 2, 2, 2]})
    end = max(o.sent_at for o in evidence.outcomes) + WINDOW_S
    edges = np.arange(0.0, end, WINDOW_S)
    for arm, color in ARM_COLORS.items():
        mine = [o for o in evidence.outcomes if o.arm == arm]
        windows = [summarize([o for o in mine if start <= o.sent_at < start + WINDOW_S], WINDOW_S) for start in edges]
        middle = edges + WINDOW_S / 2
        latency.plot(middle, [w.ttft_p99_ms for w in windows], color=color, label=f"{arm} TTFT p99")
        latency.plot(middle, [w.ttft_p50_ms for w in windows], color=color, linestyle=":", label=f"{arm} TTFT p50")
        slo.plot(middle, [100 * w.slo_attainment for w in windows], color=color, marker=".", label=arm)
    latency.set(yscale="log", ylabel="ms (streams)", title=f"Latency per {WINDOW_S:g}-s window")
    slo.set(ylabel="% of SLO requests", ylim=(0, 105), title="SLO attainment")
    _correction_panel(corrections, evidence)
    _model_panel(models, evidence)
    for ax in (latency, slo, corrections, models):
        ax.axvspan(0, warmup_s, color="0.92", label="warm-up" if ax is latency else None)
        ax.axvline(change_at, color="black", linestyle="--", linewidth=1,
                   label="the regime change" if ax is latency else None)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small", loc="upper left")
    models.set_xlabel("seconds of load")
    return _save(fig, path)


def _correction_panel(ax: Axes, evidence: Evidence) -> None:
    """Per server, the factor headroom's router multiplied its TTFT (solid) and TPOT (dashed) predictions by."""
    series: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for elapsed, samples in evidence.router:
        for labels, factor in samples.get("headroom_router_latency_correction", []):
            if labels.get("target") in ("ttft", "tpot"):
                series.setdefault((labels.get("server", ""), labels["target"]), []).append((elapsed, factor))
    colors: dict[str, str] = {}
    for (server, target), points in sorted(series.items()):
        color = colors.setdefault(server, f"C{len(colors)}")
        times, factors = zip(*points)
        ax.plot(times, factors, color=color, linestyle="-" if target == "ttft" else "--",
                label=server if target == "ttft" else None)
    ax.axhline(1.0, color="0.5", linewidth=0.8)
    ax.set(ylabel="× the model's prediction", title="headroom's correction of each server's predictions, learned "
           "from its completions (TTFT solid, TPOT dashed)")


def _model_panel(ax: Axes, evidence: Evidence) -> None:
    """Mean model versions promoted over time, and drift detections as marks named by the model that drifted."""
    series: dict[str, list[tuple[float, float]]] = {}
    drifts_before: dict[str, float] = {}
    for elapsed, samples in evidence.worker:
        for labels, version in samples.get("headroom_model_version", []):
            if labels.get("objective") == "mean":
                series.setdefault(f"{labels.get('pool_key', '')}/{labels.get('target', '')}", []).append(
                    (elapsed, version))
        for labels, drifts in samples.get("headroom_drift_events_total", []):
            model = f"{labels.get('pool_key', '')}/{labels.get('target', '')}"
            if drifts > drifts_before.get(model, 0.0):
                ax.axvline(elapsed, color="red", linewidth=1.5, alpha=0.7)
                ax.annotate(f"drift: {model}", (elapsed, 1.0), xycoords=("data", "axes fraction"), rotation=90,
                            fontsize="x-small", color="red", ha="right", va="top")
            drifts_before[model] = drifts
    for i, (name, points) in enumerate(sorted(series.items())):
        times, versions = zip(*points)  # each model a little apart, so equal versions do not hide each other
        ax.step(times, np.asarray(versions) + 0.06 * i, where="post", label=name)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(ylabel="model version", title="Mean models promoted by the worker (version), drift detections (red)")


def predicted_vs_actual(evidence: Evidence, change_at: float, path: Path) -> Path:
    import polars as pl

    frame = evidence.telemetry
    assert frame is not None
    first = pl.when(pl.col("stream")).then(pl.col("ttft_ms")).otherwise(pl.col("e2e_ms"))
    predicted = pl.when(pl.col("stream")).then(pl.col("predicted_ttft_ms")).otherwise(pl.col("predicted_e2e_ms"))
    start = evidence.load_began_unix or frame.get_column("arrival_ts").min()
    points = frame.select(first.alias("actual"), predicted.alias("predicted"),
                          (pl.col("arrival_ts") - start).alias("t")).drop_nulls()
    fig, ax = plt.subplots(figsize=(6, 6))
    for label, part, color in (("before the regime change", points.filter(pl.col("t") < change_at), "tab:green"),
                               ("after", points.filter(pl.col("t") >= change_at), "tab:red")):
        if part.height:
            ax.scatter(part["actual"], part["predicted"], s=6, alpha=0.4, color=color, label=f"{label} ({part.height})")
    if points.height:
        actual_ms, predicted_ms = points["actual"].to_numpy(), points["predicted"].to_numpy()
        low = max(min(actual_ms.min(), predicted_ms.min()), 1.0)
        high = max(actual_ms.max(), predicted_ms.max())
        ax.plot([low, high], [low, high], "k--", linewidth=0.8, label="prediction = actual")
        ax.set(xscale="log", yscale="log")
    ax.set(xlabel="actual ms (TTFT of streams, E2E otherwise)", ylabel="predicted ms (the prediction the router used)",
           title="headroom: predicted vs actual")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    return _save(fig, path)


def _save(fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
