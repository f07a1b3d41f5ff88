"""Rich tables of benchmark rows."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from headroom.sim.bench import PolicyRow
from headroom.sim.settings import SimSettings


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
