"""Routing through regime changes on the offline simulator: headroom against every baseline, per 5-s window.

    .venv/bin/python -m headroom.benchmarks.regime_quality [--scenario all|NAME,...] [--seeds 3] [--baselines ...]
        [--variant NAME=JSON] [--mix slo|demo] [--trace NAME] [--slo-ttft-ms MS] [--slo-tpot-ms MS] [--no-oracle]
        [--json PATH] [--markdown PATH]

Each scenario of :mod:`sim.scenarios` (its pool, load, change and SLO) is played by :mod:`sim.scenario_play`.
Training is router_quality's (:func:`benchmarks.router_quality.train_models`: round 1 on random routing, round 2
adds headroom's own decisions) on the scenario's pool in its steady regime — no change — at 50%, 70% and 100% of
its capacity, from a stretch of the trace the evaluation does not use (scenarios on the same pool share it): the models know the pool
before the change, as a router that has served it a while does. The policies are router_quality's (every
baseline, ``headroom``, variants, the oracle); seed ``k`` draws the arrivals from its own stretch of the trace
and seeds the pickers. The report (:mod:`benchmarks.regime_report`): per 5-s window attainment and p99 TTFT,
whole-run and after-change numbers of every policy, and headroom's time to recover against the best baseline.

``--mix``: ``slo`` (the scenarios' own: every request streams and carries the SLO) or ``demo``, the demo's
(:class:`demo.load.Mix`: some requests do not stream, some streams carry no SLO, some are sheddable), in training and
evaluation alike. Attainment and TTFT p99 are over the requests that carry the SLO, as the demo counts them.

``--trace`` plays the same changes on another trace (a shared trace's name or a synthetic load, as
``router_quality`` takes them: ``code:burst_factor=8``), with the SLO at full speed from ``--slo-ttft-ms`` and
``--slo-tpot-ms`` (default: the scenarios' own); the trace must hold the rows the training and the seeds skip.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from functools import cache
from pathlib import Path

from headroom.benchmarks.regime_report import Summary, markdown, summarize
from headroom.benchmarks.router_quality import policies, train_models
from headroom.benchmarks.routing_policies import BASELINES
from headroom.demo.load import Mix, as_headed, dress
from headroom.router.framework.predictors import EmbeddedPredictor
from headroom.sim.request import SimRequest
from headroom.sim.scenario_play import play, pool, served
from headroom.sim.scenarios import SCENARIOS, Scenario, scenario
from headroom.sim.windows import Row

TRAIN_LOADS = (0.5, 0.7, 1.0)
TRAIN_SKIP = 10_000  # training arrivals come from this far into the trace
SEED_SKIP = 2_500  # seed k's arrivals start k × this far in


MIXES = {"slo": {"slo_share": 1.0, "stream_share": 1.0, "sheddable_share": 0.0}, "demo": {}}  # Mix's shares


def dressed(s: Scenario, mix: str, seed: int, skip: int) -> list[tuple[SimRequest, dict[str, str]]]:
    """The scenario's requests for ``seed`` with the headers ``mix`` gives them (see the module docstring)."""
    return dress(s.requests(seed=seed, skip=skip), Mix(slo_ttft_ms=s.slo[0], slo_tpot_ms=s.slo[1], seed=seed,
                                                       **MIXES[mix]))


def arrivals(s: Scenario, mix: str, seed: int, skip: int) -> list[SimRequest]:
    """:func:`dressed`, as the simulator routes them."""
    return as_headed(dressed(s, mix, seed, skip))


@cache
def train(steady: Scenario, mix: str) -> tuple[EmbeddedPredictor, list[int]]:
    """Models of a pool in its steady regime (``steady`` has no change; see the module docstring), and the
    streams' output lengths a router that ran before has seen."""
    runs = [(arrivals(steady.with_(load=load), mix, 100, TRAIN_SKIP), pool(steady)) for load in TRAIN_LOADS]
    runtime, records = train_models(runs, steady.slo)
    lengths = [r.output_tokens for r in records if r.stream][-1000:]
    return EmbeddedPredictor(runtime), lengths


def play_all(s: Scenario, args: argparse.Namespace) -> Summary:
    """Every policy on every seed of scenario ``s``; the summary of :func:`benchmarks.regime_report.summarize`."""
    steady = s.with_(name="steady", change=None, load=TRAIN_LOADS[1])
    predictor, lengths = train(steady, args.mix)
    runs: dict[str, list[list[Row]]] = {}
    headers = steady.slo if args.mix == "slo" else None  # the demo's mix: each request its own, or none
    for seed in range(args.seeds):
        requests = arrivals(s, args.mix, seed, seed * SEED_SKIP)
        for name, make, _ in policies(args, headers, predictor, include_no_slo=False):
            result = play(s, requests, make(seed), seed=seed, lengths=lengths, telemetry=False)
            runs.setdefault(name, []).append(served(result, s.slo))
    return summarize(s, runs, baselines=BASELINES)  # the variants are headroom's, not references


def chosen_scenarios(args: argparse.Namespace) -> list[Scenario]:
    """The scenarios ``--scenario`` names, on ``--trace`` with the SLO of ``--slo-ttft-ms`` and ``--slo-tpot-ms``
    where given; ValueError names what is unknown or out of range."""
    chosen = list(SCENARIOS.values()) if args.scenario == "all" else [scenario(n) for n in args.scenario.split(",")]
    overrides = {field: value for field, value in (("trace", args.trace), ("slo_ttft_ms", args.slo_ttft_ms),
                                                   ("slo_tpot_ms", args.slo_tpot_ms)) if value is not None}
    for field in ("slo_ttft_ms", "slo_tpot_ms"):
        if field in overrides and not 0 < overrides[field] < math.inf:
            raise ValueError(f"--{field.replace('_', '-')} must be a positive number of ms, not {overrides[field]:g}")
    return [s.with_(**overrides) for s in chosen]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="all", help=f"all, or names among {', '.join(SCENARIOS)}.")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--baselines", default=",".join(BASELINES))
    parser.add_argument("--variant", action="append", default=[], help="NAME=JSON: another headroom pipeline.")
    parser.add_argument("--mix", choices=tuple(MIXES), default="slo", help="Which requests carry SLOs and stream.")
    parser.add_argument("--trace", help="Play the scenarios on this trace (default: each scenario's own).")
    parser.add_argument("--slo-ttft-ms", type=float, help="The TTFT SLO at full speed (default: the scenarios').")
    parser.add_argument("--slo-tpot-ms", type=float, help="The TPOT SLO at full speed (default: the scenarios').")
    parser.add_argument("--no-oracle", action="store_true")
    parser.add_argument("--json", type=Path, help="Write every number here.")
    parser.add_argument("--markdown", type=Path, help="Write the tables here too.")
    args = parser.parse_args()
    args.pool_slo = False
    try:
        chosen = chosen_scenarios(args)
        for s in chosen:  # the trace holds the stretches the training and the last seed play, or one line now
            for skip in (TRAIN_SKIP, max(args.seeds - 1, 0) * SEED_SKIP):
                s.requests(skip=skip)
    except ValueError as err:
        parser.error(str(err))
    started, load_start = time.time(), os.getloadavg()
    summaries, text = [], []
    for s in chosen:
        summary = play_all(s, args)
        summaries.append(summary)
        text.append(markdown(summary))
        print(text[-1], flush=True)
    footer = (f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: done in {time.time() - started:.0f} s; load "
              f"average {' / '.join(f'{x:.1f}' for x in load_start)} at the start, "
              f"{' / '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
    print(f"# {footer}")
    if args.json:
        args.json.write_text(json.dumps({"scenarios": summaries, "run": footer}, indent=2))
    if args.markdown:
        args.markdown.write_text("\n".join(text) + f"\n{footer}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
