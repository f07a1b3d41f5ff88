"""The demo's live terminal view (rich) and its closing summary: both arms side by side."""

from __future__ import annotations

import math

from rich.console import Group
from rich.table import Table

from headroom.demo.report import PHASES, WARMUP_SHARE, Report, buys, by_window, decision_time, heuristic_share
from headroom.demo.run import ARMS, Tick
from headroom.demo.scrape import by_label, total
from headroom.demo.stats import Summary, summarize

WINDOW_S = 10.0


def live_panel(tick: Tick) -> Group:
    phase = "after the regime change" if tick.elapsed >= tick.change_at else "before the regime change"
    recent = _arms_table(f"last {WINDOW_S:.0f} s — {tick.elapsed:.0f} s in, {phase}",
                         {arm: summarize([o for o in tick.outcomes if o.arm == arm
                                          and o.sent_at >= tick.elapsed - WINDOW_S], WINDOW_S) for arm in ARMS})
    so_far = _arms_table("so far", {arm: summarize([o for o in tick.outcomes if o.arm == arm], tick.elapsed)
                                    for arm in ARMS})
    models = Table(title="headroom: models and learning")
    for column in ("", "value"):
        models.add_column(column)
    after = heuristic_share(tick.warmed, tick.router) if tick.warmed is not None else math.nan
    models.add_row("heuristic share of decisions", f"{_pct(heuristic_share(None, tick.router))} of all, "
                   f"{_pct(after)} after the warm-up ({tick.warmup_s:.0f} s)")
    mape = {tuple(labels.values()): value for labels, value in tick.worker.get("headroom_model_holdout_mape", [])}
    for labels, version in sorted((tuple(labels.values()), value)
                                  for labels, value in tick.worker.get("headroom_model_version", [])
                                  if labels.get("objective") == "mean"):
        models.add_row(f"model {'/'.join(labels)}", f"v{version:.0f}, holdout MAPE {mape.get(labels, math.nan):.0%}")
    models.add_row("promoted / rejected versions",
                   f"{total(tick.worker, 'headroom_model_promotions_total'):.0f} / "
                   f"{total(tick.worker, 'headroom_model_rejections_total'):.0f}")
    drift = by_label(tick.worker, "headroom_drift_events_total", "target")
    models.add_row("drift events", ", ".join(f"{k}: {v:.0f}" for k, v in sorted(drift.items())) or "none")
    models.add_row("telemetry ingested / dead-lettered",
                   f"{total(tick.worker, 'headroom_telemetry_ingested_total'):.0f} / "
                   f"{total(tick.worker, 'headroom_telemetry_dead_letters_total'):.0f}")
    return Group(recent, so_far, models)


def summary_tables(report: Report) -> Group:
    tables = [_arms_table(phase, {arm: Summary(**phases[key]) for arm, phases in report.arms.items()})
              for key, phase in PHASES]
    facts = Table(title="what the system did" + (" (interrupted: partial)" if report.interrupted else ""))
    facts.add_column("")
    facts.add_column("value")
    facts.add_row("what headroom bought", buys(report))
    facts.add_row("window by window", by_window(report))
    facts.add_row("telemetry records in Kafka", str(report.telemetry_in_kafka))
    facts.add_row("model versions promoted", f"{report.promotions:.0f}")
    facts.add_row("models in use by headroom's router",
                  ", ".join(f"{k} v{v:.0f}" for k, v in report.model_versions.items()) or "none")
    facts.add_row("drift events", (", ".join(f"{k}: {v:.0f}" for k, v in report.drift_events.items()) or "none")
                  + f" ({report.drift_events_before_change:.0f} before the regime change)")
    facts.add_row("heuristic share of headroom's decisions", f"{_pct(report.heuristic_share)} of all, "
                  f"{_pct(report.heuristic_share_after_warmup)} after the warm-up (the first {WARMUP_SHARE:.0%})")
    facts.add_row("router's decision time", decision_time(report))
    facts.add_row("requests held by headroom's router", f"{report.held:.0f} (late everywhere in a burst)")
    facts.add_row("heuristic decisions by reason",
                  ", ".join(f"{k}: {v:.0f}" for k, v in report.heuristic_reasons.items()) or "none")
    load = report.host["load_average_at_start"][0], report.host["load_average_at_end"][0]
    facts.add_row("host load average (1 min)", f"{load[0]:.1f} → {load[1]:.1f} on {report.host['cores']} cores"
                  + (": busier than its cores, latencies inflated for both arms" if report.busy_host else ""))
    facts.add_row("processes left running", ", ".join(report.processes_left) or "none")
    return Group(*tables, facts)


def _arms_table(title: str, arms: dict[str, Summary]) -> Table:
    table = Table(title=title)
    for column in ("arm", "req/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "SLO attained", "goodput/s",
                   "shed", "failed"):
        table.add_column(column, justify="left" if column == "arm" else "right")
    for arm, s in arms.items():
        table.add_row(arm, f"{s.rate_per_s:.1f}", _ms(s.ttft_p50_ms), _ms(s.ttft_p99_ms), _ms(s.tpot_p50_ms),
                      _ms(s.tpot_p99_ms), _pct(s.slo_attainment), f"{s.goodput_per_s:.1f}", str(s.rejected),
                      str(s.failed))
    return table


def _ms(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.0f} ms"


def _pct(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.0%}"
