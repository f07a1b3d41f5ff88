"""Regime changes live, on real processes: headroom's arm against the heuristic arm, per 5-s window.

    .venv/bin/python -m headroom.benchmarks.regime_live [--scenario all|NAME,...] [--seeds 3] [--first-seed 0]
        [--quick] [--duration S] [--mix slo|demo] [--out DIR]

Each run starts what ``headroom demo`` starts (:class:`demo.arms.TwoArms`: a broker, the learning worker, the
simulated servers and two routers over two identical pools, headroom's predicting in process) with a scenario's pool — every server
that will join it already running, routed to by neither router yet — at the scenario's time scale, sends the
scenario's arrivals (:meth:`sim.scenarios.Scenario.requests`: every request streams and carries the SLO headers;
with ``--mix demo``, some do not, as in the demo)
through both arms at once, and makes the change at its time: ``/admin/slowdown`` or ``/admin/kv`` on the servers
of both arms, or a new server list in both routers' polled files; a prompt shift or a burst is in the arrivals.
headroom's models are learned during the run from its own telemetry, as in the demo (the change comes half way).

Seeds are interleaved (seed 0 of every scenario, then seed 1, ...); seed ``k`` draws its arrivals from its own
stretch of the trace, as ``regime_quality.py`` does. The report (:mod:`benchmarks.regime_report`, the heuristic
arm as the reference): per 5-s window attainment and p99 TTFT of both arms, whole-run and after-change numbers,
the time to recover per seed, and the load average around each run, as ``regime-live.json`` and
``regime-live.md`` in ``--out``. ``--quick``: one seed, 60 s runs with the change at 30 s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from headroom.benchmarks.regime_quality import MIXES, SEED_SKIP, dressed
from headroom.benchmarks.regime_report import Summary, markdown, summarize
from headroom.contract.settings import from_env
from headroom.demo import load
from headroom.demo.arms import ARMS, Layout, TwoArms, change_events
from headroom.demo.scrape import by_label, scrape, total
from headroom.demo.settings import DemoSettings
from headroom.ports import free_port
from headroom.sim.scenarios import (
    SCENARIOS,
    Scenario,
    scenario,
)
from headroom.sim.windows import Row


def play_live(s: Scenario, seed: int, state_dir: Path, base_port: int, mix: str = "slo") -> Summary:
    """One run of scenario ``s``; each arm's requests as rows (:mod:`sim.windows`), and what the run saw: among it,
    once a second, headroom's model versions, its corrections per server and the worker's drift events and
    promotions (``timeline``), every request that missed its SLO (``missed``) and each server's share
    (:func:`served`)."""
    demo = from_env(DemoSettings)
    arms = TwoArms(state_dir, base_port, seed, Layout.of(s), min_samples=demo.min_samples,
                   retrain_interval_s=demo.retrain_interval_s)
    requests = dressed(s, mix, seed, seed * SEED_SKIP)
    due = {request.request_id: request.arrival_s for request, _ in requests}
    outcomes: list[load.ClientOutcome] = []
    made: list[dict[str, Any]] = []
    timeline: list[dict[str, Any]] = []

    def tick(elapsed: float) -> None:
        try:
            router = scrape(f"http://127.0.0.1:{arms.ports.router_http}/metrics")
            worker = scrape(f"http://127.0.0.1:{arms.ports.worker_metrics}/metrics")
        except OSError:  # not up yet, or too slow this second: the timeline skips it
            return
        timeline.append({
            "t": round(elapsed, 1),
            "versions": by_label(router, "headroom_router_model_version", "target"),
            "corrections": {f"{labels['server']}/{labels['target']}": round(value, 3)
                            for labels, value in router.get("headroom_router_latency_correction", [])
                            if value != 1.0},
            "drift_events": by_label(worker, "headroom_drift_events_total", "target"),
            "promotions": total(worker, "headroom_model_promotions_total")})

    load_start = os.getloadavg()
    try:
        arms.start()
        arms.drive(requests, s.duration_s, change_events(s, arms, made), outcomes.append, tick)
    finally:
        arms.stop()
    rows: dict[str, list[Row]] = {arm: [] for arm in ARMS}
    for o in outcomes:  # at the time it was due, so that both arms' windows hold the same requests
        if o.has_slo:  # as the demo counts: the requests sent with an SLO (every one, but in the demo's mix)
            rows[o.arm].append((due[o.request_id], o.ttft_ms if o.status == 200 else None, o.slo_met is True))
    missed = sorted((o for o in outcomes if o.has_slo and o.slo_met is not True), key=lambda o: due[o.request_id])
    late = sorted(o.sent_at - due[o.request_id] for o in outcomes)
    return {"rows": rows, "load_average": [list(load_start), list(os.getloadavg())], "changes_made": made,
            "failed": {arm: sum(o.status not in (200, 429) for o in outcomes if o.arm == arm) for arm in ARMS},
            "errors": sorted({f"{o.status}: {o.error[:120]}" for o in outcomes if o.status != 200})[:5],
            "sent_late_s": {"p50": late[len(late) // 2], "max": late[-1]} if late else {},
            "components_ready_s": arms.ready, "timeline": timeline,
            "served": served(outcomes, due, s.change_at_s),
            "missed": [{"arm": o.arm, "due_s": round(due[o.request_id], 2), "server": o.server, "status": o.status,
                        "ttft_ms": o.ttft_ms, "tpot_ms": o.tpot_ms, "output_tokens": o.output_tokens,
                        "error": o.error[:80]} for o in missed]}


def served(outcomes: list[load.ClientOutcome], due: dict[str, float], change_at_s: float) -> dict[str, Any]:
    """Per arm and server: the requests with an SLO it was given, and how many of them missed, before and after
    the change (by the time each was due)."""
    counts: dict[str, Any] = {arm: {} for arm in ARMS}
    for o in outcomes:
        if o.has_slo:
            tally = counts[o.arm].setdefault(o.server or "none", {"before": [0, 0], "after": [0, 0]})
            part = tally["after" if due[o.request_id] >= change_at_s else "before"]
            part[0] += 1
            part[1] += o.slo_met is not True
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="all", help=f"all, or names among {', '.join(SCENARIOS)}.")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0, help="Seeds run: this one and the next --seeds - 1.")
    parser.add_argument("--quick", action="store_true", help="One seed, 60 s runs, the change at 30 s.")
    parser.add_argument("--duration", type=float, help="Seconds of each run (the change half way).")
    parser.add_argument("--time-scale", type=float, help="Run the servers this many times as fast as their hardware "
                                                         "(default: the scenario's; the SLO follows).")
    parser.add_argument("--mix", choices=tuple(MIXES), default="slo", help="Which requests carry SLOs and stream: "
                                                                          "every one, or the demo's mix.")
    parser.add_argument("--out", type=Path, default=Path("regime-live"), help="Where the report goes.")
    parser.add_argument("--state-dir", type=Path, default=Path(".headroom/regime-live"))
    args = parser.parse_args()
    try:
        chosen = list(SCENARIOS.values()) if args.scenario == "all" else [scenario(n) for n in args.scenario.split(",")]
    except ValueError as err:
        parser.error(str(err))
    seeds, duration = (1, 60.0) if args.quick else (args.seeds, None)
    duration = args.duration or duration
    if duration:
        chosen = [s.with_(duration_s=duration, change_at_s=duration / 2) for s in chosen]
    if args.time_scale:
        chosen = [s.with_(time_scale=args.time_scale) for s in chosen]
    for variable in ("HEADROOM_KAFKA_PORT", "HEADROOM_KAFKA_CONTROLLER_PORT"):  # free ones unless told
        os.environ.setdefault(variable, str(free_port()))
    base_port = random.Random().randrange(20000, 30000, 50)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    runs: dict[str, dict[str, list[list[Row]]]] = {s.name: {arm: [] for arm in ARMS} for s in chosen}
    seen: dict[str, list[Summary]] = {s.name: [] for s in chosen}
    for seed in range(args.first_seed, args.first_seed + seeds):
        for s in chosen:
            print(f"# {s.name} seed {seed}: {s.describe()}", flush=True)
            run = play_live(s, seed, args.state_dir, base_port, args.mix)
            rows = run.pop("rows")
            for arm in ARMS:
                runs[s.name][arm].append(rows[arm])
            seen[s.name].append({"seed": seed, **run})
            print(f"#   load average {run['load_average']}, failed {run['failed']} {run['errors']}, sent late by "
                  f"{run['sent_late_s']}, changes {run['changes_made']}", flush=True)
    summaries = []
    for s in chosen:
        summary = summarize(s, runs[s.name], reference="baseline")
        summary["runs"] = seen[s.name]
        summaries.append(summary)
    footer = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {len(chosen)} scenarios × {seeds} seeds in "
              f"{time.time() - started:.0f} s on {os.cpu_count()} cores; load average per run (1 min, start → end): "
              + "; ".join(f"{s.name} " + ", ".join(f"{r['load_average'][0][0]:.1f}→{r['load_average'][1][0]:.1f}"
                                                   for r in seen[s.name]) for s in chosen))
    text = "\n".join(markdown(summary) for summary in summaries) + f"\n{footer}\n"
    (args.out / "regime-live.json").write_text(json.dumps({"scenarios": summaries, "run": footer}, indent=2))
    (args.out / "regime-live.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
