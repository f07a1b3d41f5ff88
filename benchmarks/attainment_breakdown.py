"""Who meets the SLO, and where: one seed of the routing-quality benchmark broken down per server and over time.

    .venv/bin/python -m headroom.benchmarks.attainment_breakdown --trace code --loads 1.5,2 [--train-loads 0.5,1,1.5,2]
        [--baselines least-kv] [--variant NAME=JSON ...]

Takes :mod:`benchmarks.router_quality`'s options (here by default the code load past capacity, least-KV
and no oracle) and trains as it does, then runs each policy once (seed 0) at each load and prints, per
policy: each server's requests, how many met the SLO, the TTFT SLO and the TPOT SLO; how many met it in each tenth of the arrival window; the TPOT quantiles of the
requests that started within their TTFT SLO; and, for headroom's pipelines, how the predicted TPOT of the
chosen server compares with the TPOT the request got (the SLO verdict reads that prediction).
"""

from __future__ import annotations

import sys
from collections import Counter

import numpy as np

from headroom.benchmarks.router_quality import SERVERS, arguments, policies, prepare
from headroom.sim.pool import run, uniform_pool
from headroom.sim.request import SimRequest
from headroom.sim.results import RunResult

TPOT_BINS = (0, 20, 30, 35, 40, 45, 50, 1e9)  # predicted TPOT bands, ms: finest just under a 50 ms SLO


def breakdown(name: str, requests: list[SimRequest], result: RunResult, slo: tuple[float, float]) -> None:
    """Print who of ``requests`` met ``slo`` (TTFT and TPOT, ms) in ``result``: per server, per tenth of the
    arrival window, the TPOT of those that started in time, and the predicted TPOT against the TPOT got."""
    ttft_slo, tpot_slo = slo
    span = requests[-1].arrival_s or 1.0
    per_server: dict[str, Counter[str]] = {}
    by_tenth: list[Counter[str]] = [Counter() for _ in range(10)]
    for o in result.outcomes:
        ttft_ok = o.ttft_ms <= ttft_slo
        tpot_ok = o.tpot_ms is None or o.tpot_ms <= tpot_slo
        counts = per_server.setdefault(o.server_id, Counter())
        counts.update(n=1, met=ttft_ok and tpot_ok, ttft=ttft_ok, tpot=tpot_ok)
        by_tenth[min(9, int(10 * o.request.arrival_s / span))].update(n=1, met=ttft_ok and tpot_ok)
    met = sum(c["met"] for c in per_server.values())
    print(f"\n## {name}: {met} of {len(requests)} met; arrivals over {span:.1f} s, "
          f"last completion {result.end_s:.1f} s")
    print("server (most requests first): requests / met / TTFT met / TPOT met")
    for server, c in sorted(per_server.items(), key=lambda kv: -kv[1]["n"]):
        print(f"  {server}: {c['n']} / {c['met']} / {c['ttft']} / {c['tpot']}")
    print("met per tenth of the arrival window:", " ".join(f"{c['met']}/{c['n']}" for c in by_tenth))
    started = [o.tpot_ms for o in result.outcomes if o.ttft_ms <= ttft_slo and o.tpot_ms is not None]
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
                      f"{np.mean(actual[inside] > tpot_slo):.2f}")


def main() -> int:
    parser = arguments(__doc__.splitlines()[0])
    parser.set_defaults(trace="code", loads="1.5,2", baselines="least-kv", no_oracle=True)
    args = parser.parse_args()
    setup = prepare(args)
    for load in setup.loads:
        _, requests = setup.work.slices(load * SERVERS * setup.capacity)
        for name, make, _ in policies(args, setup.slo, setup.predictor, include_no_slo=False):
            result = run(requests, uniform_pool(SERVERS), make(0), seed=0, lengths=setup.lengths)
            breakdown(f"{name} at load {load:g}", requests, result, setup.slo)
    return 0


if __name__ == "__main__":
    sys.exit(main())
