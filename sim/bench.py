"""The simulator benchmark: simulation speed and a baseline-policy table on the public traces.

Load is set relative to capacity: a server's *capacity* on a trace is its completion rate when flooded
with the trace's requests all at once (its best sustainable throughput with full batches), measured
without prefix caching (hashes stripped) so that the capacity does not assume a routing policy; a pool of
``n`` servers at utilization ``u`` gets the trace time-scaled to ``u · n · capacity`` requests/s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from headroom.sim.policies import POLICIES, policy
from headroom.sim.pool import run, uniform_pool
from headroom.sim.results import RunResult, quantile
from headroom.sim.request import Request


@dataclass(frozen=True)
class PolicyRow:
    trace: str
    policy: str
    requests: int
    rate: float  # offered, requests/s
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p99_ms: float
    throughput_rps: float  # completed requests per virtual second
    output_tps: float  # output tokens per virtual second
    prefix_hit_rate: float  # cached prompt tokens / prompt tokens
    preemptions: int
    sim_rps: float  # simulated requests per wall-clock second
    sim_cpu_rps: float  # simulated requests per CPU second of this process


def capacity_rps(requests: Sequence[Request], server_type: str = "h100", sample: int | None = None) -> float:
    """One server's completion rate when flooded with (up to ``sample`` of) the trace's requests, no prefix reuse."""
    flood = [replace(r, arrival_s=0.0, prefix_hashes=()) for r in requests[:sample]]
    result = run(flood, uniform_pool(1, server_type), policy("round-robin"))
    return len(result.outcomes) / result.end_s


def summarize(trace: str, name: str, requests: Sequence[Request], result: RunResult, cpu_s: float) -> PolicyRow:
    outcomes = result.outcomes
    span = max(o.completion_s for o in outcomes) - min(r.arrival_s for r in requests)
    prompt = sum(o.request.prompt_tokens for o in outcomes)
    rate = len(requests) / max(requests[-1].arrival_s - requests[0].arrival_s, 1e-9)
    return PolicyRow(trace, name, len(requests), rate, quantile([o.ttft_ms for o in outcomes], 0.5),
                     quantile([o.ttft_ms for o in outcomes], 0.99),
                     quantile([t for o in outcomes if (t := o.tpot_ms) is not None], 0.99),
                     len(outcomes) / span, sum(o.output_tokens for o in outcomes) / span,
                     sum(o.cached_prompt_tokens for o in outcomes) / max(prompt, 1),
                     sum(o.preemptions for o in outcomes), len(requests) / result.wall_s, len(requests) / cpu_s)


WARMUP_REQUESTS = 2000


def bench_policies(trace: str, load: Callable[[float | None], list[Request]], *, servers: int = 16,
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
