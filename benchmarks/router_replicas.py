"""Routing quality with several router replicas in front of one pool, on the offline simulator.

    .venv/bin/python -m headroom.benchmarks.router_replicas [--trace PATH|azure|mooncake|code] [--format F] [--requests 3000]
        [--loads 2,4] [--routers 1,2,4]

The setup of :mod:`benchmarks.router_quality` (16 simulated H100 servers, the trace time-scaled to multiples of
the per-server capacity, models trained the same way), with R routers sharing the pool: each request reaches
one router at random, and each router sees the scraped metrics of every server but only its own in-flight
requests and only the prefixes it sent itself (``prefix_knowledge="router"``, for every R, so the rows compare
like with like), and the TPOT SLOs and output lengths of only the streams it relays. Each router runs its
own engine and picker (its own random stream). The models are trained as the online pipeline would train
them for that many routers: on telemetry recorded by R routers (whose in-flight features count only their
own requests). Policies: ``composite`` (the reference's fallback scorer), ``headroom no-SLO`` and
``headroom`` (SLO headers on every request), as in :mod:`benchmarks.router_quality`.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from headroom.benchmarks.router_quality import SERVERS, Workload, measure, train_runtime
from headroom.benchmarks.routing_policies import headroom
from headroom.predictor.runtime import ModelRuntime
from headroom.router.framework.predictors import EmbeddedPredictor
from headroom.sim.capacity import capacity_rps
from headroom.sim.policies import policy
from headroom.sim.pool import run, uniform_pool
from headroom.sim.view import PickFunction


def picks(name: str, runtime: ModelRuntime, slo: tuple[float, float], routers: int, seed: int) -> list[PickFunction]:
    """One pick function per router (each with its own random stream)."""
    seeds = [1000 * seed + r for r in range(routers)]
    if name == "composite":
        return [policy("composite", s) for s in seeds]
    predictor = EmbeddedPredictor(runtime)
    return [headroom(predictor, None if name == "headroom no-SLO" else slo, s) for s in seeds]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default="azure", help="A trace file, a shared trace or a synthetic load spec.")
    parser.add_argument("--format", choices=("azure", "mooncake", "synthetic"), help="Default: from --trace.")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--slo-ttft-ms", type=float, default=1000.0)
    parser.add_argument("--slo-tpot-ms", type=float, default=50.0)
    parser.add_argument("--loads", default="2,4")
    parser.add_argument("--routers", default="1,2,4")
    parser.add_argument("--policies", default="composite,headroom no-SLO,headroom")
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args()
    slo = (args.slo_ttft_ms, args.slo_tpot_ms)
    loads = [float(x) for x in args.loads.split(",")]
    work = Workload(args.trace, args.format, args.requests)
    capacity = capacity_rps(work.slices(None)[0])
    replicas = [int(r) for r in args.routers.split(",")]
    started = time.time()
    trained = {r: train_runtime(work, capacity, loads, slo, r, "router") for r in replicas}
    print(f"# {args.trace}: capacity {capacity:.2f} req/s per server; models trained for {replicas} routers "
          f"in {time.time() - started:.0f} s; prefix knowledge: each router's own")
    print("| policy | load | routers | TTFT p50 ms | TTFT p99 ms | TPOT p99 ms | SLO attainment | goodput req/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for load in loads:
        _, requests = work.slices(load * SERVERS * capacity)
        for name in args.policies.split(","):
            for routers in replicas:
                runtime, records = trained[routers]
                lengths = [r.output_tokens for r in records if r.stream][-1000:]  # what routers that ran before saw
                runs = [measure(requests, run(requests, uniform_pool(SERVERS), picks(name, runtime, slo, routers, seed),
                                              seed=seed, routers=routers, prefix_knowledge="router", lengths=lengths),
                                slo)
                        for seed in range(args.seeds)]
                p50, _, p99, tpot99, attained, _, _, goodput, _ = np.mean(runs, axis=0)
                print(f"| {name} | {load:.2f} | {routers} | {p50:.0f} | {p99:.0f} | {tpot99:.1f} | {attained:.3f} | "
                      f"{goodput:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
