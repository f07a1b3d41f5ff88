"""The simulator benchmark (``headroom bench sim``): simulation speed and a baseline-policy table on the
public traces, at a load relative to capacity (:mod:`sim.capacity`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from headroom.sim.capacity import capacity_rps
from headroom.sim.policies import POLICIES, policy
from headroom.sim.pool import run, uniform_pool
from headroom.sim.report import PolicyRow, summarize
from headroom.sim.request import SimRequest

WARMUP_REQUESTS = 2000


def bench_policies(trace: str, load: Callable[[float | None], list[SimRequest]], *, servers: int = 16,
                   utilization: float = 0.8, policies: Sequence[str] = tuple(POLICIES), seed: int = 0,
                   server_type: str = "h100") -> list[PolicyRow]:
    """One row per policy: ``load(rate)`` gives the trace at a rate (None: native timing).

    Each policy's timed run follows an untimed warm-up run of the first ``WARMUP_REQUESTS`` requests, so the
    first policy measured pays no more for a cold process than the others.
    """
    per_server = capacity_rps(load(None), server_type)
    requests = load(utilization * servers * per_server)
    rows = []
    for name in policies:
        run(requests[:WARMUP_REQUESTS], uniform_pool(servers, server_type), policy(name, seed), seed=seed)
        cpu = time.process_time()
        result = run(requests, uniform_pool(servers, server_type), policy(name, seed), seed=seed)
        rows.append(summarize(trace, name, requests, result, time.process_time() - cpu))
    return rows
