"""Closed-loop results for people: a timeline CSV, PNGs of replicas, signal and TTFT over time and of cost
against SLO attainment, and a recommendation's report in Markdown."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING

from headroom.autoscale.closed_loop import LoopResult

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from headroom.autoscale.advice import ScalingAdvice
    from headroom.autoscale.recommend import Evaluation, Goal, Recommendation


def write_timeline_csv(result: LoopResult, path: str | Path) -> None:
    """One row per loop tick: time, desired replicas, servers by state, and each HPA metric's pool mean."""
    names = sorted({name for point in result.timeline for name in point.metrics})
    with Path(path).open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["t_s", "spec_replicas", "ready", "loading", "draining", *names])
        for p in result.timeline:
            writer.writerow([f"{p.t:.1f}", p.spec_replicas, p.ready, p.loading, p.draining,
                             *(f"{p.metrics[n]:.3f}" if n in p.metrics else "" for n in names)])


def plot_timeline(result: LoopResult, path: str | Path, slo_ttft_ms: float | None = None, title: str = "") -> None:
    """Three stacked panels: replicas (desired, ready, loading), HPA metrics, TTFT per request (log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [p.t for p in result.timeline]
    fig, (replicas, signal, latency) = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    replicas.step(t, [p.spec_replicas for p in result.timeline], where="post", label="desired")
    replicas.step(t, [p.ready for p in result.timeline], where="post", label="serving")
    replicas.step(t, [p.loading for p in result.timeline], where="post", label="loading")
    replicas.set_ylabel("replicas")
    replicas.legend(loc="upper left")
    for name in sorted({n for p in result.timeline for n in p.metrics}):
        signal.plot(t, [p.metrics.get(name, float("nan")) for p in result.timeline], label=name)
    signal.set_ylabel("pool mean")
    signal.legend(loc="upper left")
    latency.scatter(result.arrival_s, result.ttft_ms, s=1, alpha=0.3)
    latency.set_yscale("log")
    latency.set_ylabel("TTFT ms")
    latency.set_xlabel("virtual time (s)")
    if slo_ttft_ms is not None:
        latency.axhline(slo_ttft_ms, color="red", linewidth=1, label="SLO")
        latency.legend(loc="upper left")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_cost_vs_slo(evaluations: Sequence[Evaluation], path: str | Path, slo_ttft_ms: float) -> None:
    """Replica-hours against TTFT SLO attainment, one colour per signal; passing runs filled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(figsize=(8, 5))
    signals = sorted({e.candidate.signal.value for e in evaluations})
    for index, signal in enumerate(signals):
        runs = [e for e in evaluations if e.candidate.signal.value == signal]
        colour = f"C{index}"
        axes.scatter([e.replica_hours for e in runs if e.meets], [e.attainment for e in runs if e.meets],
                     color=colour, label=signal)
        axes.scatter([e.replica_hours for e in runs if not e.meets], [e.attainment for e in runs if not e.meets],
                     facecolors="none", edgecolors=colour)
    axes.set_xlabel("replica-hours")
    axes.set_ylabel(f"share of requests with TTFT ≤ {slo_ttft_ms:g} ms")
    axes.set_title("cost vs SLO attainment (filled: TTFT p99 within the SLO)")
    axes.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def recommendation_markdown(result: Recommendation, goal: Goal, args: argparse.Namespace, command: str,
                            advice: ScalingAdvice | None = None, not_met: str | None = None,
                            notes: tuple[str, ...] = ()) -> str:
    """The search's full table as Markdown (``result``: a Recommendation, ``goal``: its Goal), with the
    command that reproduces the figures, the advice when the trace never exercised scaling, or why nothing
    met the SLO (``not_met``)."""
    slo = goal.slo
    settings = result.settings
    lines = [f"# Autoscaling recommendation for {args.trace.name} (×{args.speedup:g})", "",
             f"SLO: TTFT p99 ≤ {slo.ttft_p99_ms:g} ms" + (f", TPOT p99 ≤ {slo.tpot_p99_ms:g} ms"
                                                         if slo.tpot_p99_ms else "") + ". "
             f"Pool: {settings.model_server.label} on simulated {settings.server_type} servers, replicas "
             f"{goal.min_replicas}..{goal.max_replicas}; every autoscaler tried has minReplicas "
             f"{result.warm_replicas} (the smallest pool serving the first two minutes within the SLO) and every run "
             f"starts there; metrics through {goal.pipeline.value}.", ""]
    if advice is not None:
        fixed = result.fixed
        lines += ["**No recommendation**: " + (f"{fixed.replicas} fixed server(s) carry the whole trace within the "
                                               f"SLO (TTFT p99 {fixed.ttft_p99_ms:.0f} ms); " if fixed else "")
                  + advice.message + ".", ""]
    elif not_met is not None:
        lines += [f"**No configuration met the SLO**: {not_met}.", ""]
    elif result.best is not None:
        c = result.best.candidate
        lines += [f"Recommended: `{c.signal.value}` target {c.target_text}, {c.behavior} behavior, minReplicas "
                  f"{result.warm_replicas}.", "",
                  "Replay the written autoscaler (same figures, same seed; it starts at its minReplicas, as a "
                  "Deployment does once the HPA is applied):", "", f"    {command}", ""]
        if result.cold is not None:
            lines += [f"From {goal.min_replicas} replica(s) (`--min-replicas`) the same autoscaler serves "
                      f"{result.cold.attainment:.2%} within the SLO (TTFT p99 {result.cold.ttft_p99_ms:.0f} ms): "
                      f"the first minutes need the larger pool.", ""]
    lines += ["| signal | target | behavior | replica-h | TTFT p99 ms | TPOT p99 ms | attainment | rescales | SLO |",
              "|---|---|---|---|---|---|---|---|---|"]
    for e in result.ranked():
        c = e.candidate
        lines.append(f"| {c.signal.value} | {c.target_text} | {c.behavior} | {e.replica_hours:.4f} | "
                     f"{e.ttft_p99_ms:.0f} | {e.tpot_p99_ms:.1f} | {e.attainment:.2%} | {e.rescales} | "
                     f"{'met' if e.meets else 'missed'} |")
    if result.traps or notes:
        lines += ["", "## Notes", ""] + [f"- `{t.code}`: {t.message}" for t in result.traps] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"
