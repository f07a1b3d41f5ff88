"""``headroom demo`` — the whole system on one machine under trace load, with a live view and a report."""

from __future__ import annotations

import argparse
import signal
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.live import Live

from headroom.cli.environment import reads
from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.demo.processes import ComponentFailed
from headroom.demo.settings import DemoSettings
from headroom.errors import CommandError
from headroom.localkafka.errors import BrokerError
from headroom.localkafka.settings import BrokerSettings
from headroom.sim.traces import TraceError, TraceSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    defaults = DemoSettings()
    parser = subparsers.add_parser("demo", help="run headroom end to end on a local Kafka broker and a simulated pool",
                                   **reads(DemoSettings, TraceSettings, BrokerSettings, KafkaSettings))
    parser.add_argument("--duration", type=float, help=f"seconds of load (default {defaults.duration_s:g})")
    parser.add_argument("--rate", type=float,
                        help=f"requests/s of the time-scaled Azure trace (default {defaults.rate:g})")
    parser.add_argument("--report-dir", type=Path, help=f"where the report goes (default {defaults.report_dir}/)")
    parser.add_argument("--seed", type=int, help=f"seed of the load and the simulated servers (default {defaults.seed})")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from headroom.demo.run import run as run_demo
    from headroom.demo.run import write_report
    from headroom.demo.view import live_panel, summary_tables

    try:  # before anything starts: the trace the load comes from
        trace = from_env(TraceSettings).path("azure")
    except TraceError as err:
        raise CommandError(str(err)) from err
    settings = from_env(DemoSettings)
    overrides = {"duration_s": args.duration, "rate": args.rate, "report_dir": args.report_dir, "seed": args.seed}
    settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
    signal.signal(signal.SIGTERM, _stop)  # so a terminated demo still shuts its processes down
    console = Console()
    console.print(f"headroom demo: {settings.fast_servers} H100 + {settings.slow_servers} A100 simulated servers, "
                  f"Azure conversation trace at {settings.rate:g} req/s for {settings.duration_s:g} s; the H100 "
                  f"servers slow down {settings.slowdown:g}x at {settings.regime_change_at:.0%} of the run")
    try:
        with Live(console=console, refresh_per_second=2, transient=False) as live:
            report = run_demo(settings, trace, on_tick=lambda tick: live.update(live_panel(tick)))
    except (BrokerError, ComponentFailed) as err:
        raise CommandError(str(err)) from err
    console.print(summary_tables(report))
    path = write_report(report, settings.report_dir)
    console.print(f"report: {path}  ({report.seconds:.0f} s in all)")
    return 0


def _stop(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
