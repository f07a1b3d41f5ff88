"""Who meets the SLO, and where: one seed of the routing-quality benchmark broken down per server and over time.

    .venv/bin/python benchmarks/attainment_breakdown.py --trace code --loads 1.5,2 [--train-loads 0.5,1,1.5,2]
        [--baselines least-kv] [--variant NAME=JSON ...]

Trains as :mod:`benchmarks.router_quality` does (same workload, slices and models), then runs each policy
once (seed 0) at each load and prints, per policy: each server's requests, how many met the SLO, the TTFT
SLO and the TPOT SLO; how many met it in each tenth of the arrival window; the TPOT quantiles of the
requests that started within their TTFT SLO; and, for headroom's pipelines, how the predicted TPOT of the
chosen server compares with the TPOT the request got (the SLO verdict reads that prediction).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import numpy as np

from headroom.benchmarks.router_quality import SERVERS, Workload, train_runtime, variant
from headroom.benchmarks.routing_policies import BASELINES, headroom
from headroom.router.predictors import EmbeddedPredictor
from headroom.sim.capacity import capacity_rps
from headroom.sim.pool import run, uniform_pool

TPOT_BINS = (0, 20, 30, 35, 40, 45, 50, 1e9)


def breakdown(name: str, requests, result, slo) -> None:
    span = requests[-1].arrival_s or 1.0
    per_server: dict[str, Counter] = {}
    by_tenth = [Counter() for _ in range(10)]
    for o in result.outcomes:
        ttft_ok = o.ttft_ms <= slo[0]
        tpot_ok = o.tpot_ms is None or o.tpot_ms <= slo[1]
        counts = per_server.setdefault(o.server_id, Counter())
        counts.update(n=1, met=ttft_ok and tpot_ok, ttft=ttft_ok, tpot=tpot_ok)
        by_tenth[min(9, int(10 * o.request.arrival_s / span))].update(n=1, met=ttft_ok and tpot_ok)
    met = sum(c["met"] for c in per_server.values())
    print(f"\n## {name}: {met} of {len(requests)} met; arrivals over {span:.1f} s, last completion {result.end_s:.1f} s")
    print("server (most requests first): requests / met / TTFT met / TPOT met")
    for server, c in sorted(per_server.items(), key=lambda kv: -kv[1]["n"]):
        print(f"  {server}: {c['n']} / {c['met']} / {c['ttft']} / {c['tpot']}")
    print("met per tenth of the arrival window:", " ".join(f"{c['met']}/{c['n']}" for c in by_tenth))
    started = [o.tpot_ms for o in result.outcomes if o.ttft_ms <= slo[0] and o.tpot_ms is not None]
    if started:
        q = np.percentile(started, [10, 25, 50, 75, 90])
        print("TPOT ms of those within the TTFT SLO, p10/p25/p50/p75/p90:", " / ".join(f"{x:.1f}" for x in q))
    rows = [(r.predicted_tpot_ms, r.tpot_ms) for r in result.records
            if r.predicted_tpot_ms is not None and r.tpot_ms is not None]
    if rows:
        predicted, actual = np.array(rows).T
        print("predicted TPOT ms of the chosen server: requests, actual mean, share over the TPOT SLO")
        for low, high in zip(TPOT_BINS, TPOT_BINS[1:]):
            inside = (predicted >= low) & (predicted < high)
            if inside.any():
                print(f"  [{low:g}, {high:g}): {inside.sum()}, {actual[inside].mean():.1f}, "
                      f"{np.mean(actual[inside] > slo[1]):.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="code")
    parser.add_argument("--format", choices=("azure", "mooncake", "synthetic"))
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--load-seed", type=int, default=0)
    parser.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    parser.add_argument("--slo-tpot-ms", type=float, default=50.0)
    parser.add_argument("--loads", default="1.5,2")
    parser.add_argument("--train-loads")
    parser.add_argument("--baselines", default="least-kv")
    parser.add_argument("--variant", action="append", default=[], help="NAME=JSON: another headroom pipeline.")
    args = parser.parse_args()
    slo = (args.slo_ttft_ms, args.slo_tpot_ms)
    work = Workload(args.trace, args.format, args.requests, args.load_seed)
    capacity = capacity_rps(work.slices(None)[0])
    loads = [float(x) for x in args.loads.split(",")]
    train_loads = [float(x) for x in args.train_loads.split(",")] if args.train_loads else loads
    runtime, records = train_runtime(work, capacity, train_loads, slo)
    lengths = [r.output_tokens for r in records if r.stream][-1000:]
    predictor = EmbeddedPredictor(runtime)
    policies = [(name, BASELINES[name][0]) for name in args.baselines.split(",") if name]
    policies.append(("headroom", lambda seed: headroom(predictor, slo, seed)))
    for name, pipeline, overlays in map(variant, args.variant):
        policies.append((name, lambda seed, p=pipeline, o=overlays: headroom(predictor, slo, seed, p or None, o)))
    for load in loads:
        _, requests = work.slices(load * SERVERS * capacity)
        for name, make in policies:
            result = run(requests, uniform_pool(SERVERS), make(0), seed=0, lengths=lengths)
            breakdown(f"{name} at load {load:g}", requests, result, slo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
