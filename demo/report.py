"""The demo's report: ``demo.json`` (every number), ``demo.md`` (the same for people, with the host's load)
and the PNG plots of :mod:`demo.plots`. A report of an interrupted run says so and covers what ran.

The heuristic share is defined once (:func:`heuristic_share`), for the live view, the terminal summary and
``demo.md`` alike: decisions the heuristic profile made in headroom's arm over all its decisions, in the
whole run and after the warm-up.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headroom.demo.load import ClientOutcome
from headroom.demo.scrape import Samples, total

if TYPE_CHECKING:
    import polars as pl

WARMUP_SHARE = 0.4  # the first 40% of the run may take the heuristic while models are first trained
PHASES = (("whole", "whole run"), ("before", "before the regime change"), ("after", "after the regime change"))


@dataclass
class Report:
    settings: dict[str, str]
    host: dict[str, Any]  # cores, load averages (1, 5, 15 min) at start and end
    components: dict[str, float]  # seconds each took to become ready
    arms: dict[str, dict[str, dict[str, Any]]]  # arm -> phase (whole, before, after) -> demo.stats.Summary
    telemetry_in_kafka: int
    model_versions: dict[str, float]
    promotions: float
    drift_events: dict[str, float]
    drift_events_before_change: float
    heuristic_reasons: dict[str, float]
    decisions: dict[str, float]
    heuristic_share: float
    heuristic_share_after_warmup: float
    interrupted: bool = False
    load_seconds: float = 0.0
    processes_left: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def busy_host(self) -> bool:
        """Whether the host ran more than its cores could take while the demo ran (from the load averages)."""
        cores = self.host.get("cores") or 1
        return max(self.host["load_average_at_start"][0], self.host["load_average_at_end"][0]) > cores


@dataclass
class Evidence:
    """What the plots are drawn from, beside the report's numbers."""

    outcomes: list[ClientOutcome]
    worker: list[tuple[float, Samples]]  # the learning worker's metrics, second by second
    telemetry: pl.DataFrame | None  # the run's telemetry records, with the predictions that were used
    load_began_unix: float | None


def heuristic_share(start: Samples | None, end: Samples) -> float:
    """Share of headroom's decisions between two scrapes of its router that the heuristic profile made."""
    def count(samples: Samples | None, **labels: str) -> float:
        return total(samples, "headroom_router_decisions_total", **labels) if samples else 0.0
    decided = count(end) - count(start)
    return (count(end, profile="heuristic") - count(start, profile="heuristic")) / decided if decided else math.nan


def write_report(report: Report, evidence: Evidence, directory: Path) -> Path:
    """``demo.json``, ``demo.md`` and the plots; returns the Markdown path."""
    from headroom.demo import plots

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "demo.json").write_text(json.dumps(asdict(report), indent=2, default=str))
    s = report.settings
    change_at = float(s["duration_s"]) * float(s["regime_change_at"])
    figures = plots.draw(evidence, change_at, float(s["duration_s"]) * WARMUP_SHARE, directory)
    lines = ["# headroom demo" + (" (interrupted: a partial report)" if report.interrupted else ""), ""]
    if report.interrupted:
        lines += [f"The run was interrupted after {report.load_seconds:.0f} s of load (of {s['duration_s']} s); "
                  f"everything below covers what ran.", ""]
    lines += [f"Two identical simulated pools ({s['fast_servers']} H100 + {s['slow_servers']} A100 each) took the same "
              f"Azure conversation trace at {float(s['rate']):g} req/s: **headroom** routed by predicted latency with "
              f"models it learned from its own telemetry; **baseline** by the heuristic profile (KV-cache free, "
              f"queue, prefix match). The H100 servers of both slowed down {s['slowdown']}× at "
              f"{float(s['regime_change_at']):.0%} of the run.", "",
              _host_line(report), "",
              "| arm | phase | req/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | SLO attained | "
              "goodput/s | shed | failed |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key, phase in PHASES:
        for arm, phases in report.arms.items():
            p = phases[key]
            lines.append(f"| {arm} | {phase} | {p['rate_per_s']:.1f} | {p['ttft_p50_ms']:.0f} | {p['ttft_p99_ms']:.0f} "
                         f"| {p['tpot_p50_ms']:.1f} | {p['tpot_p99_ms']:.1f} | {_pct(p['slo_attainment'])} | "
                         f"{p['goodput_per_s']:.1f} | {p['rejected']} | {p['failed']} |")
    lines += ["", f"**What headroom bought**: {buys(report)}", ""]
    lines += [f"![{name}]({path.name})" for name, path in figures.items()] + [""]
    lines += [f"- components ready after (s): {report.components}",
              f"- telemetry records in Kafka: {report.telemetry_in_kafka} (headroom's arm completed "
              f"{report.arms['headroom']['whole']['completed']}; the baseline sends none)",
              f"- model versions promoted by the worker: {report.promotions:.0f}",
              f"- models in use by headroom's router at the end: {report.model_versions}",
              f"- drift events: {report.drift_events} ({report.drift_events_before_change:.0f} before the change)",
              f"- heuristic share of headroom's decisions: {_pct(report.heuristic_share)} of all, "
              f"{_pct(report.heuristic_share_after_warmup)} after the warm-up (the first "
              f"{WARMUP_SHARE:.0%} of the run)",
              f"- headroom's heuristic decisions by reason: {report.heuristic_reasons}",
              f"- headroom's decisions by profile: {report.decisions}",
              f"- processes left running: {report.processes_left or 'none'}",
              f"- wall time: {report.seconds:.0f} s", ""]
    (directory / "demo.md").write_text("\n".join(lines))
    return directory / "demo.md"


def buys(report: Report) -> str:
    """headroom against the baseline after the regime change (the whole run when it never came)."""
    key = "after" if report.arms["headroom"]["after"]["completed"] else "whole"
    mine, base = report.arms["headroom"][key], report.arms["baseline"][key]
    when = "after the regime change" if key == "after" else "over the run"
    ratio = mine["ttft_p99_ms"] / base["ttft_p99_ms"] if base["ttft_p99_ms"] else math.nan
    return (f"{when}, headroom vs baseline: SLO attainment {_pct(mine['slo_attainment'])} vs "
            f"{_pct(base['slo_attainment'])}, goodput {mine['goodput_per_s']:.1f} vs {base['goodput_per_s']:.1f} req/s, "
            f"TTFT p99 {mine['ttft_p99_ms']:.0f} vs {base['ttft_p99_ms']:.0f} ms ({ratio:.2f}× the baseline's)")


def _host_line(report: Report) -> str:
    h = report.host
    start, end = (" ".join(f"{x:.2f}" for x in h[k]) for k in ("load_average_at_start", "load_average_at_end"))
    line = f"Host: {h['cores']} cores; load average (1, 5, 15 min) {start} at the start, {end} at the end."
    if report.busy_host:
        line += (" **The host was busier than its cores**: every process waited for a CPU, so latencies are "
                 "higher than on an idle machine — for both arms alike, which share the host; compare the arms, "
                 "not these numbers with another run's.")
    return line


def _pct(value: float) -> str:
    return "—" if value != value else f"{value:.0%}"
