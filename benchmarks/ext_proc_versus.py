"""headroom's ext_proc against GIE's endpoint picker on the same pool and client (``headroom bench ext-proc
--versus-epp``).

The same simulated servers (:func:`benchmarks.epp.sim_fleet`, one process and loopback address each) serve
every arm: headroom's router with embedded prediction (``headroom-predicted``) and with the heuristic profile
alone (``headroom-heuristic``, ``--predictor none``), each in its own process as ``headroom bench ext-proc``
runs it, and the EPP (:mod:`benchmarks.epp`) with its default configuration (``epp-default``) and with the
configuration matched to headroom's heuristic (``epp-matched``); on request, each headroom arm again with the grpcio
servicer instead of the compiled front (``headroom-predicted-grpcio``, ``headroom-heuristic-grpcio``). All run for the whole bench, each scraping the
pool; one client plays Envoy in ``FULL_DUPLEX_STREAMED`` mode for every arm alike — the compiled one
(:func:`benchmarks.ext_proc.drive_go`) by default, this process's (:func:`benchmarks.ext_proc.drive`) with
``client="python"`` — one arm at a time, in an order that alternates from round to round. Per run:
decisions per second of the arm's CPU time (its process and any it started, from ``/proc``), the decision
latency's p50 and p99 as the client sees it, and the arm's resident memory at the end. Per round, the ratio of
each headroom arm to its EPP arm (:data:`PAIRS`).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from headroom.benchmarks.epp import epp_pool, sim_fleet, start_epp
from headroom.benchmarks.ext_proc import Driven, drive, drive_go, wait_routed
from headroom.benchmarks.live import Process, load_average, start_router

ARMS = ("headroom-predicted", "epp-default", "headroom-heuristic", "epp-matched")  # the default run
GRPCIO_ARMS = ("headroom-predicted-grpcio", "headroom-heuristic-grpcio")  # the reference front, when named
PAIRS = (("headroom-predicted", "epp-default"), ("headroom-heuristic", "epp-matched"),
         ("headroom-predicted-grpcio", "epp-default"), ("headroom-heuristic-grpcio", "epp-matched"))


@dataclass(frozen=True)
class ArmRun:
    arm: str
    round: int
    decisions: int
    refused: int
    cpu_s: float
    wall_s: float
    p50_ms: float
    p99_ms: float
    rss_mib: float
    load_average: str

    @property
    def decisions_per_cpu_s(self) -> float:
        return self.decisions / self.cpu_s if self.cpu_s else float("inf")

    @property
    def cpu_ms_per_decision(self) -> float:
        return 1000 * self.cpu_s / max(1, self.decisions)


def bench_versus_epp(servers: int = 16, streams: int = 16, seconds: float = 30.0, rounds: int = 3,
                     arms: Sequence[str] = ARMS, client: str = "go") -> list[ArmRun]:
    """Every run, in the order measured; ``client``: ``go`` (:func:`~benchmarks.ext_proc.drive_go`) or ``python``
    (:func:`~benchmarks.ext_proc.drive`)."""
    runs: list[ArmRun] = []
    processes: dict[str, tuple[Process, int]] = {}
    with contextlib.ExitStack() as stack:
        addresses = stack.enter_context(sim_fleet(servers))
        kube = stack.enter_context(epp_pool(addresses)) if any(a.startswith("epp-") for a in arms) else None
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="headroom-bench-versus-"))
        try:
            for arm in arms:
                folder = Path(scratch) / arm
                folder.mkdir()
                if kube is not None and arm.startswith("epp-"):
                    processes[arm] = start_epp(kube, arm.removeprefix("epp-"), folder)
                else:
                    predictor = "embedded" if arm.startswith("headroom-predicted") else "none"
                    processes[arm] = start_router(addresses, folder, predictor=predictor, ext_proc=True,
                                                  ext_proc_front="grpcio" if arm.endswith("-grpcio") else "native")
                wait_routed(processes[arm][1])
            for round_ in range(rounds):
                for arm in arms if round_ % 2 == 0 else arms[::-1]:
                    runs.append(_run(arm, round_, *processes[arm], streams, seconds, client))
        finally:
            for process, _ in processes.values():
                process.stop()
    return runs


def _run(arm: str, round_: int, process: Process, port: int, streams: int, seconds: float, client: str) -> ArmRun:
    load = load_average()

    def load_for(duration: float) -> Driven:
        return drive_go(port, streams, duration) if client == "go" else asyncio.run(drive(port, streams, duration))

    load_for(1.0)  # warm-up
    before, began = process.cpu, time.monotonic()
    driven = load_for(seconds)
    cpu, wall = process.cpu - before, time.monotonic() - began
    return ArmRun(arm, round_, driven.streams - driven.refused, driven.refused, cpu, wall, driven.p50_ms,
                  driven.p99_ms, process.rss_mib, f"{load} → {load_average()}")


def ratios(runs: Sequence[ArmRun]) -> list[dict[str, object]]:
    """Per pair and round: headroom's arm over the EPP's, of decisions per CPU-second, latency and memory."""
    rows: list[dict[str, object]] = []
    by = {(r.arm, r.round): r for r in runs}
    for ours, theirs in PAIRS:
        for round_ in sorted({r.round for r in runs}):
            if (ours, round_) in by and (theirs, round_) in by:
                a, b = by[ours, round_], by[theirs, round_]
                rows.append({"pair": f"{ours} / {theirs}", "round": round_,
                             "per_cpu_s": round(a.decisions_per_cpu_s / b.decisions_per_cpu_s, 3),
                             "p50": round(a.p50_ms / b.p50_ms, 3), "p99": round(a.p99_ms / b.p99_ms, 3),
                             "rss": round(a.rss_mib / b.rss_mib, 3), "load_average": a.load_average})
    return rows


def print_report(runs: Sequence[ArmRun]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    table = Table(title="ext_proc: headroom against GIE's endpoint picker (same servers and client, interleaved)")
    for column in ("arm", "round", "decisions/CPU-s", "CPU ms/decision", "decisions/s", "p50 ms", "p99 ms",
                   "RSS MiB", "refused", "load average"):
        table.add_column(column, justify="right")
    for r in runs:
        table.add_row(r.arm, str(r.round + 1), f"{r.decisions_per_cpu_s:,.0f}", f"{r.cpu_ms_per_decision:.3f}",
                      f"{r.decisions / r.wall_s:,.0f}", f"{r.p50_ms:.1f}", f"{r.p99_ms:.1f}", f"{r.rss_mib:.0f}",
                      str(r.refused), r.load_average)
    console.print(table)
    summary = Table(title="per round: headroom / EPP (decisions per CPU-second: higher is better; latency and "
                          "memory: lower is better)")
    for column in ("pair", "round", "per CPU-s", "p50", "p99", "RSS", "load average"):
        summary.add_column(column, justify="right")
    rows = ratios(runs)
    for row in rows:
        summary.add_row(*(str(row[k]) for k in ("pair", "round", "per_cpu_s", "p50", "p99", "rss", "load_average")))
    for ours, theirs in PAIRS:
        mine = [row for row in rows if row["pair"] == f"{ours} / {theirs}"]
        if mine:
            summary.add_row(f"{ours} / {theirs}", "median",
                            *(f"{statistics.median(float(str(row[k])) for row in mine):.3f}"
                              for k in ("per_cpu_s", "p50", "p99", "rss")), "")
    console.print(summary)
