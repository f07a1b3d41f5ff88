"""A simulated run summed up as one row per trace and policy, and Rich tables of such rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from headroom.sim.request import SimRequest
from headroom.sim.results import RunResult, quantile
from headroom.sim.settings import SimSettings


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


def summarize(trace: str, name: str, requests: Sequence[SimRequest], result: RunResult, cpu_s: float) -> PolicyRow:
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



def policy_table(rows: Sequence[PolicyRow], settings: SimSettings) -> Table:
    table = Table(title=f"{settings.servers} × {settings.server_type} at {settings.utilization:.0%} of capacity")
    for name in ("trace", "policy", "requests", "rate req/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p99 ms",
                 "done req/s", "out tok/s", "prefix hit", "preempt", "sim req/s (wall)", "sim req/s (cpu)"):
        table.add_column(name, justify="left" if name in ("trace", "policy") else "right")
    for r in rows:
        table.add_row(r.trace, r.policy, f"{r.requests:,}", f"{r.rate:.1f}", f"{r.ttft_p50_ms:.1f}",
                      f"{r.ttft_p99_ms:.1f}", f"{r.tpot_p99_ms:.1f}", f"{r.throughput_rps:.1f}", f"{r.output_tps:,.0f}",
                      f"{r.prefix_hit_rate:.1%}", f"{r.preemptions:,}", f"{r.sim_rps:,.0f}", f"{r.sim_cpu_rps:,.0f}")
    return table


def print_policy_table(rows: Sequence[PolicyRow], settings: SimSettings) -> None:
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)
    console.print(policy_table(rows, settings))
