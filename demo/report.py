"""The demo's report: ``demo.json`` (every number), ``demo.md`` (the same for people, with the host's load),
the PNG plots of :mod:`demo.plots`, and what they are drawn from: ``requests.parquet`` (every request as both
arms' client saw it) and ``telemetry.parquet`` (headroom's completion records, with the server and the
predictions each was placed with). A report of an interrupted run says so and covers what ran.

The heuristic share is defined once (:func:`heuristic_share`), for the live view, the terminal summary and
``demo.md`` alike: decisions the heuristic profile made in headroom's arm over all its decisions, in the
whole run and after the warm-up.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headroom.demo.arms import ARMS
from headroom.demo.load import ClientOutcome
from headroom.demo.scrape import Samples, total
from headroom.demo.stats import summarize

if TYPE_CHECKING:
    import polars as pl

WARMUP_SHARE = 0.4  # the first 40% of the run may take the heuristic while models are first trained
WINDOW_S = 5.0
PHASES = (("whole", "whole run"), ("before", "before the regime change"), ("after", "after the regime change"))


@dataclass
class Report:
    settings: dict[str, str]
    scenario: str  # what was played (sim.scenarios.Scenario.describe)
    rate_per_s: float  # the arrival rate before the change
    slo_ms: list[float]  # the TTFT and TPOT SLO of the requests that carry one
    windows_after: dict[str, Any]  # headroom against the baseline per window after the change (compare_windows)
    changes_made: list[dict[str, Any]]  # when the change was made, as the harness saw it
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
    peak_corrections_after_change: dict[str, dict[str, float]]  # server -> target -> most its predictions were scaled by
    decision_ms: dict[str, float]  # arm -> mean time its router took to schedule a request
    held: float = 0.0  # requests headroom's router held before sending them (late everywhere in a burst)
    interrupted: bool = False
    load_seconds: float = 0.0
    processes_left: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def busy_host(self) -> bool:
        """Whether the host ran more than its cores could take while the demo ran (from the load averages)."""
        cores = self.host.get("cores") or 1
        return bool(max(self.host["load_average_at_start"][0], self.host["load_average_at_end"][0]) > cores)


@dataclass
class Evidence:
    """What the plots are drawn from, beside the report's numbers."""

    outcomes: list[ClientOutcome]
    worker: list[tuple[float, Samples]]  # the learning worker's metrics, second by second
    telemetry: pl.DataFrame | None  # the run's telemetry records, with the predictions that were used
    load_began_unix: float | None
    router: list[tuple[float, Samples]] = field(default_factory=list)  # headroom's router's metrics, second by second


def heuristic_share(start: Samples | None, end: Samples) -> float:
    """Share of headroom's decisions between two scrapes of its router that the heuristic profile made."""
    def count(samples: Samples | None, **labels: str) -> float:
        return total(samples, "headroom_router_decisions_total", **labels) if samples else 0.0
    decided = count(end) - count(start)
    return (count(end, profile="heuristic") - count(start, profile="heuristic")) / decided if decided else math.nan


def compare_windows(outcomes: Sequence[ClientOutcome], change_at: float, seconds: float,
                    window_s: float = WINDOW_S) -> dict[str, Any]:
    """Headroom against the baseline in every ``window_s`` window after the change: in how many its SLO attainment
    was at least the baseline's and its TTFT p99 (streams) at most the baseline's, and the range of the differences."""
    starts = [change_at + i * window_s for i in range(int((seconds - change_at) // window_s))]
    better_attainment = lower_p99 = 0
    attainment_gaps, p99_ratios = [], []
    for start in starts:
        ours, theirs = (summarize([o for o in outcomes if o.arm == arm and start <= o.sent_at < start + window_s],
                                  window_s) for arm in ARMS)
        if not (math.isnan(ours.slo_attainment) or math.isnan(theirs.slo_attainment)):
            attainment_gaps.append(ours.slo_attainment - theirs.slo_attainment)
            better_attainment += ours.slo_attainment >= theirs.slo_attainment
        if theirs.ttft_p99_ms > 0 and not math.isnan(ours.ttft_p99_ms):
            p99_ratios.append(ours.ttft_p99_ms / theirs.ttft_p99_ms)
            lower_p99 += ours.ttft_p99_ms <= theirs.ttft_p99_ms
    return {"windows": len(starts), "window_s": window_s, "attainment_at_least": better_attainment,
            "p99_at_most": lower_p99, "attainment_gap_range": _range(attainment_gaps),
            "p99_ratio_range": _range(p99_ratios)}


def _range(values: list[float]) -> list[float]:
    return [min(values), max(values)] if values else []


def write_report(report: Report, evidence: Evidence, directory: Path) -> Path:
    """``demo.json``, ``demo.md`` and the plots; returns the Markdown path."""
    from headroom.demo import plots

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "demo.json").write_text(json.dumps(asdict(report), indent=2, default=str))
    write_evidence(evidence, directory)
    s = report.settings
    change_at = float(s["duration_s"]) * float(s["regime_change_at"])
    figures = plots.draw(evidence, change_at, float(s["duration_s"]) * WARMUP_SHARE, directory)
    lines = ["# headroom demo" + (" (interrupted: a partial report)" if report.interrupted else ""), ""]
    if report.interrupted:
        lines += [f"The run was interrupted after {report.load_seconds:.0f} s of load (of {s['duration_s']} s); "
                  f"everything below covers what ran.", ""]
    lines += [f"Two identical simulated pools took the same Azure conversation trace ({report.rate_per_s:.1f} req/s): "
              f"**headroom** routed by predicted latency with models it learned from its own telemetry; **baseline** "
              f"by the heuristic profile (KV-cache free, queue, prefix match). The scenario: {report.scenario}. The "
              f"servers run at {float(s['time_scale']):g}× their hardware's speed, so the SLO requests carry "
              f"{report.slo_ms[0]:.0f} ms TTFT and {report.slo_ms[1]:.0f} ms TPOT.", "",
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
    lines += ["", f"**What headroom bought**: {buys(report)}", "", f"**Window by window**: {by_window(report)}", ""]
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
              f"- {decision_time(report)}",
              f"- requests headroom's router held before sending them (late everywhere in a burst): "
              f"{report.held:.0f}",
              f"- latency corrections at their peak after the change: {report.peak_corrections_after_change}",
              f"- processes left running: {report.processes_left or 'none'}",
              f"- wall time: {report.seconds:.0f} s", ""]
    (directory / "demo.md").write_text("\n".join(lines))
    return directory / "demo.md"


def write_evidence(evidence: Evidence, directory: Path) -> None:
    """``requests.parquet`` and, when the records could be read, ``telemetry.parquet``."""
    import polars as pl

    rows = [asdict(o) for o in evidence.outcomes]
    requests = (pl.DataFrame(rows, infer_schema_length=None) if rows
                else pl.DataFrame(schema=[f.name for f in fields(ClientOutcome)]))
    requests.write_parquet(directory / "requests.parquet")
    if evidence.telemetry is not None:
        evidence.telemetry.write_parquet(directory / "telemetry.parquet")


def decision_time(report: Report) -> str:
    mine, base = report.decision_ms["headroom"], report.decision_ms["baseline"]
    return f"time to schedule a request, mean: headroom {mine:.2f} ms, heuristic {base:.2f} ms"


def buys(report: Report) -> str:
    """headroom against the baseline after the regime change (the whole run when it never came)."""
    key = "after" if report.arms["headroom"]["after"]["completed"] else "whole"
    mine, base = report.arms["headroom"][key], report.arms["baseline"][key]
    when = "after the regime change" if key == "after" else "over the run"
    ratio = mine["ttft_p99_ms"] / base["ttft_p99_ms"] if base["ttft_p99_ms"] else math.nan
    return (f"{when}, headroom vs baseline: SLO attainment {_pct(mine['slo_attainment'])} vs "
            f"{_pct(base['slo_attainment'])}, goodput {mine['goodput_per_s']:.1f} vs {base['goodput_per_s']:.1f} req/s, "
            f"TTFT p99 {mine['ttft_p99_ms']:.0f} vs {base['ttft_p99_ms']:.0f} ms ({ratio:.2f}× the baseline's)")


def by_window(report: Report) -> str:
    """How headroom did against the baseline in each window after the change (the spread behind the verdict)."""
    w = report.windows_after
    if not w.get("windows"):
        return "no window after the change"
    gaps, ratios = w["attainment_gap_range"], w["p99_ratio_range"]
    spread = (f" (attainment {100 * gaps[0]:+.0f} to {100 * gaps[1]:+.0f} points" if gaps else " (") + \
        (f", TTFT p99 {ratios[0]:.2f}× to {ratios[1]:.2f}× the baseline's)" if ratios else ")")
    return (f"in the {w['windows']} windows of {w['window_s']:g} s after the change, headroom's SLO attainment was at "
            f"least the baseline's in {w['attainment_at_least']} and its TTFT p99 at most the baseline's in "
            f"{w['p99_at_most']}{spread}")


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
