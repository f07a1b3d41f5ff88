"""What headroom's arm adds to TTFT at low load, request by request against the heuristic arm.

    .venv/bin/python -m headroom.benchmarks.ttft_overhead [--seeds 3] [--duration 240] [--load 0.15] [--out DIR]

Each run starts both arms of ``headroom demo`` (:class:`demo.arms.TwoArms`) over identical pools of four H100
servers at the demo's time scale, sends the Azure trace through both at ``--load`` of the pool's capacity, and
changes nothing. Every request reaches both routers at the same moment, so the difference between its two TTFTs
(headroom − heuristic) is what headroom's arm adds — deciding, relaying, and where it sent the request — with the
noise both arms share taken out. headroom's models are learned during the run; only the second half counts, once
they decide (the share of its decisions still left to the heuristic then is reported). Per run: the median of the
paired differences with a bootstrap 95% interval, each arm's TTFT p50, and each router's mean decision time (its
``headroom_router_decision_seconds``); the load average at the start and end.
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

import numpy as np

from headroom.contract.settings import from_env
from headroom.demo import load
from headroom.demo.arms import ARMS, Layout, TwoArms
from headroom.demo.scrape import by_label, scrape, total
from headroom.demo.settings import DemoSettings
from headroom.sim.scenarios import Scenario

POOL = ("h100-0", "h100-1", "h100-2", "h100-3")
RESAMPLES = 2000  # of the bootstrap interval


def run_once(seed: int, duration_s: float, load_share: float, state_dir: Path, base_port: int) -> dict[str, Any]:
    demo = from_env(DemoSettings)
    quiet = Scenario("low-load", None, pool=POOL, load=load_share, duration_s=duration_s, change_at_s=duration_s / 2,
                     time_scale=demo.time_scale)
    arms = TwoArms(state_dir, base_port, seed, Layout.of(quiet), min_samples=demo.min_samples,
                   retrain_interval_s=demo.retrain_interval_s)
    mix = load.Mix(slo_share=1.0, stream_share=1.0, sheddable_share=0.0, slo_ttft_ms=quiet.slo[0],
                   slo_tpot_ms=quiet.slo[1], seed=seed)
    outcomes: list[load.ClientOutcome] = []
    routers = {arm: f"http://127.0.0.1:{arms.ports.http(arm)}/metrics" for arm in ARMS}
    half: dict[str, Any] = {}

    def at_half(elapsed: float) -> None:
        if elapsed >= duration_s / 2 and not half:
            half.update({arm: scrape(url) for arm, url in routers.items()})

    load_start = os.getloadavg()
    try:
        arms.start()
        arms.drive(load.dress(quiet.requests(seed=seed), mix), duration_s, [], outcomes.append, at_half)
        end = {arm: scrape(url) for arm, url in routers.items()}
    finally:
        arms.stop()
    ttft: dict[str, dict[str, float]] = {arm: {} for arm in ARMS}
    for o in outcomes:
        if o.status == 200 and o.ttft_ms is not None and o.sent_at >= duration_s / 2:
            ttft[o.arm][o.request_id] = o.ttft_ms
    paired = sorted(set(ttft["headroom"]) & set(ttft["baseline"]))
    differences = np.array([ttft["headroom"][r] - ttft["baseline"][r] for r in paired])
    return {"seed": seed, "requests_paired": len(paired), **paired_median(differences, seed),
            **{f"ttft_p50_ms_{arm}": float(np.median(list(ttft[arm].values()))) for arm in ARMS},
            **{f"decision_ms_{arm}": decision_ms(half[arm], end[arm]) for arm in ARMS},
            "heuristic_share_second_half": heuristic_share(half["headroom"], end["headroom"]),
            "load_average": [list(load_start), list(os.getloadavg())]}


def paired_median(differences: np.ndarray, seed: int) -> dict[str, float]:
    """The median of the paired differences and a bootstrap 95% interval of it."""
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(differences, (RESAMPLES, len(differences))), axis=1)
    low, high = np.percentile(medians, [2.5, 97.5])
    return {"difference_p50_ms": float(np.median(differences)), "ci_low_ms": float(low), "ci_high_ms": float(high)}


def decision_ms(before: Any, after: Any) -> float:
    """A router's mean decision time (ms) between two scrapes of its metrics."""
    count = total(after, "headroom_router_decision_seconds_count") - total(before, "headroom_router_decision_seconds_count")
    seconds = total(after, "headroom_router_decision_seconds_sum") - total(before, "headroom_router_decision_seconds_sum")
    return 1000.0 * seconds / count if count else float("nan")


def heuristic_share(before: Any, after: Any) -> float:
    """The share of headroom's decisions between two scrapes that its heuristic profile made."""
    start, end = (by_label(s, "headroom_router_decisions_total", "profile") for s in (before, after))
    made = {profile: end.get(profile, 0.0) - start.get(profile, 0.0) for profile in end}
    decided = sum(made.values())
    return made.get("heuristic", 0.0) / decided if decided else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=240.0, help="Seconds of load per run (the second half counts).")
    parser.add_argument("--load", type=float, default=0.15, help="Arrivals as a share of the pool's capacity.")
    parser.add_argument("--out", type=Path, default=Path("ttft-overhead"))
    parser.add_argument("--state-dir", type=Path, default=Path(".headroom/ttft-overhead"))
    args = parser.parse_args()
    base_port = random.Random().randrange(20000, 30000, 50)
    runs = []
    for seed in range(args.seeds):
        run = run_once(seed, args.duration, args.load, args.state_dir, base_port)
        runs.append(run)
        print(json.dumps(run), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ttft-overhead.json").write_text(json.dumps({"runs": runs, "finished": time.time()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
