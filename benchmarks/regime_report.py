"""The report of a regime-change benchmark, offline (``regime_quality.py``) or live (``regime_live.py``) alike.

A run gives, per scenario, per policy (or arm) and per seed, each request as ``(sent s, TTFT ms or None,
SLO met)`` (:mod:`sim.windows`). :func:`summarize` turns that into per 5-s window attainment and p99 TTFT (each
seed's, and their mean), whole-run and after-change attainment and p99 for every policy, and headroom's time to
recover against a reference (the best baseline offline, the heuristic arm live) in each seed; :func:`markdown`
prints it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from headroom.sim.scenarios import Scenario
from headroom.sim.windows import Row, recovery_s, whole, windows

OURS = "headroom"
RECOVERY_GOAL_S = 10.0


Summary = dict[str, Any]  # a scenario's figures as a JSON document


def summarize(scenario: Scenario, runs: Mapping[str, Sequence[Sequence[Row]]],
              reference: str | None = None, baselines: Collection[str] | None = None) -> Summary:
    """``runs``: policy → one list of rows per seed (the same seeds, in the same order, for every policy).
    ``reference`` None: the policy among ``baselines`` (default: every one but headroom and the oracle) with the
    best attainment after the change."""
    at, duration = scenario.change_at_s, scenario.duration_s
    policies: dict[str, dict[str, Any]] = {}
    for name, seeds in runs.items():
        per_seed = [windows(rows, duration) for rows in seeds]
        wholes = [whole(rows) for rows in seeds]
        afters = [whole(rows, at) for rows in seeds]
        policies[name] = {
            "whole": {"attainment": _mean(w[0] for w in wholes), "attainment_range": _range(w[0] for w in wholes),
                      "ttft_p99_ms": _mean(w[1] for w in wholes)},
            "after": {"attainment": _mean(a[0] for a in afters), "attainment_range": _range(a[0] for a in afters),
                      "ttft_p99_ms": _mean(a[1] for a in afters)},
            "per_seed": [{"whole": list(w), "after": list(a),
                          "windows": [[x.start_s, x.requests, x.attainment, x.ttft_p99_ms] for x in ws]}
                         for w, a, ws in zip(wholes, afters, per_seed)],
            "windows": [{"start_s": ws[0].start_s, "requests": _mean(w.requests for w in ws),
                         "attainment": _mean(w.attainment for w in ws), "ttft_p99_ms": _mean(w.ttft_p99_ms for w in ws)}
                        for ws in zip(*per_seed)],
            "_windows": per_seed}
    if reference is None:
        others = [p for p in policies if p != OURS and p != "oracle" and (baselines is None or p in baselines)]
        reference = max(others, key=lambda p: (round(policies[p]["after"]["attainment"], 3),
                                               -policies[p]["after"]["ttft_p99_ms"])) if others else None
    recovery = None
    if reference is not None and OURS in policies:
        recovery = [recovery_s(mine, theirs, at)
                    for mine, theirs in zip(policies[OURS]["_windows"], policies[reference]["_windows"])]
    for entry in policies.values():
        del entry["_windows"]
    return {"scenario": scenario.name, "describe": scenario.describe(), "change_at_s": at, "duration_s": duration,
            "load": scenario.load, "capacity_rps": scenario.capacity(), "slo_ms": list(scenario.slo),
            "seeds": len(next(iter(runs.values()), [])), "reference": reference, "recovery_s": recovery,
            "policies": policies, "verdict": verdict(policies, reference, recovery)}


def verdict(policies: Mapping[str, Summary], reference: str | None,
            recovery: Sequence[float | None] | None) -> dict[str, list[bool]]:
    """The goals per seed: whole-run attainment ≥ the reference's, p99 TTFT ≤ the reference's, recovery ≤ 10 s."""
    if reference is None or OURS not in policies:
        return {}
    ours, theirs = policies[OURS]["per_seed"], policies[reference]["per_seed"]
    return {"attainment_at_least": [a["whole"][0] >= b["whole"][0] for a, b in zip(ours, theirs)],
            "p99_at_most": [a["whole"][1] <= b["whole"][1] for a, b in zip(ours, theirs)],
            "recovered_within_10s": [r is not None and r <= RECOVERY_GOAL_S for r in (recovery or [])]}


def markdown(summary: Summary, window_policies: Sequence[str] = ()) -> str:
    """Tables of one scenario: whole run and after the change per policy, then headroom and the reference (and
    ``window_policies``) per 5-s window."""
    ref = summary["reference"]
    lines = [f"### {summary['describe']}", "",
             f"Capacity {summary['capacity_rps']:.2f} req/s; SLO TTFT {summary['slo_ms'][0]:.0f} ms, TPOT "
             f"{summary['slo_ms'][1]:.0f} ms; {summary['seeds']} seeds; reference: {ref}.", "",
             "| policy | attainment (whole run) | TTFT p99 ms | attainment after the change | TTFT p99 ms after |",
             "|---|---:|---:|---:|---:|"]
    for name, p in summary["policies"].items():
        w, a = p["whole"], p["after"]
        lines.append(f"| {name} | {_pct(w['attainment'])} {_span(w['attainment_range'])} | {w['ttft_p99_ms']:.0f} | "
                     f"{_pct(a['attainment'])} {_span(a['attainment_range'])} | {a['ttft_p99_ms']:.0f} |")
    shown = [p for p in (OURS, ref, *window_policies) if p in summary["policies"]]
    shown = list(dict.fromkeys(shown))
    lines += ["", "| window (s) | " + " | ".join(f"{p} attained / p99 ms" for p in shown) + " |",
              "|---:|" + "---:|" * len(shown)]
    for i, w in enumerate(summary["policies"][shown[0]]["windows"]):
        mark = " ←" if w["start_s"] == summary["change_at_s"] else ""
        cells = [summary["policies"][p]["windows"][i] for p in shown]
        lines.append(f"| {w['start_s']:.0f}{mark} | "
                     + " | ".join(f"{_pct(c['attainment'])} / {c['ttft_p99_ms']:.0f}" for c in cells) + " |")
    recovery = summary["recovery_s"] or []
    lines += ["", f"Time to recover against {ref}, per seed: "
              + ", ".join("never" if r is None else f"{r:.0f} s" for r in recovery)
              + f". Goals met per seed: {summary['verdict']}.", ""]
    return "\n".join(lines)


def _mean(values: Iterable[float | None]) -> float:
    kept = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.mean(kept)) if kept else math.nan


def _range(values: Iterable[float]) -> list[float]:
    kept = [v for v in values if not math.isnan(v)]
    return [min(kept), max(kept)] if kept else [math.nan, math.nan]


def _pct(value: float) -> str:
    return "—" if value != value else f"{100 * value:.1f}%"


def _span(pair: Sequence[float]) -> str:
    return "" if pair[0] == pair[1] or pair[0] != pair[0] else f"({100 * pair[0]:.1f}–{100 * pair[1]:.1f})"
