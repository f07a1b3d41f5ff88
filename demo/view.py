"""The demo's live terminal view (rich) and its closing summary."""

from __future__ import annotations

import math

from rich.console import Group
from rich.table import Table

from headroom.demo.run import Report, Tick, heuristic_decisions
from headroom.demo.scrape import by_label, total
from headroom.demo.stats import Summary, summarize

WINDOW_S = 10.0


def live_panel(tick: Tick) -> Group:
    recent = summarize([o for o in tick.outcomes if o.sent_at >= tick.elapsed - WINDOW_S], WINDOW_S)
    phase = "after the regime change" if tick.elapsed >= tick.change_at else "before the regime change"
    load = _summary_table(f"last {WINDOW_S:.0f} s — {tick.elapsed:.0f} s in, {phase}", recent)
    decisions = total(tick.router, "headroom_router_decisions_total")
    models = Table(title="models and learning")
    for column in ("", "value"):
        models.add_column(column)
    models.add_row("fallback share (all decisions)",
                   f"{heuristic_decisions(tick.router) / decisions:.0%}" if decisions else "—")
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
    return Group(load, models)


def summary_tables(report: Report) -> Group:
    whole = _summary_table("whole run", Summary(**report.summary))
    before = _summary_table("before the regime change", Summary(**report.before_change))
    after = _summary_table("after the regime change", Summary(**report.after_change))
    facts = Table(title="what the system did")
    facts.add_column("")
    facts.add_column("value")
    facts.add_row("telemetry records in Kafka", str(report.telemetry_in_kafka))
    facts.add_row("model versions promoted", f"{report.promotions:.0f}")
    facts.add_row("models in use by the router", ", ".join(f"{k} v{v:.0f}" for k, v in report.model_versions.items())
                  or "none")
    facts.add_row("drift events", (", ".join(f"{k}: {v:.0f}" for k, v in report.drift_events.items()) or "none")
                  + f" ({report.drift_events_before_change:.0f} before the regime change)")
    facts.add_row("fallback share after warm-up", _pct(report.fallback_share_after_warmup))
    facts.add_row("decisions by profile", ", ".join(f"{k}: {v:.0f}" for k, v in report.decisions.items()))
    facts.add_row("processes left running", ", ".join(report.processes_left) or "none")
    return Group(whole, before, after, facts)


def _summary_table(title: str, s: Summary) -> Table:
    table = Table(title=title)
    for column in ("req/s", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "SLO attained", "goodput/s",
                   "shed", "failed"):
        table.add_column(column, justify="right")
    table.add_row(f"{s.rate_per_s:.1f}", _ms(s.ttft_p50_ms), _ms(s.ttft_p99_ms), _ms(s.tpot_p50_ms),
                  _ms(s.tpot_p99_ms), _pct(s.slo_attainment), f"{s.goodput_per_s:.1f}", str(s.rejected),
                  str(s.failed))
    return table


def _ms(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.0f} ms"


def _pct(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.0%}"
