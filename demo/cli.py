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
from headroom.sim.traces import TraceSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    defaults = DemoSettings()
    parser = subparsers.add_parser("demo", help="run headroom end to end on a local Kafka broker and a simulated pool",
                                   **reads(DemoSettings, TraceSettings, BrokerSettings, KafkaSettings))
    parser.add_argument("--duration", type=float, help=f"seconds of load (default {defaults.duration_s:g})")
    parser.add_argument("--load", type=float,
                        help=f"arrivals as a share of the pool's capacity (default {defaults.load:g})")
    parser.add_argument("--report-dir", type=Path, help=f"where the report goes (default {defaults.report_dir}/)")
    parser.add_argument("--seed", type=int, help=f"seed of the load and the simulated servers (default {defaults.seed})")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    settings = from_env(DemoSettings)
    overrides = {"duration_s": args.duration, "load": args.load, "report_dir": args.report_dir, "seed": args.seed}
    settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
    traces, broker = from_env(TraceSettings), from_env(BrokerSettings, state_dir=settings.state_dir)
    from headroom.demo import preflight
    from headroom.demo.run import Demo, Ports, scenario

    try:
        played = scenario(settings)
    except ValueError as err:
        raise CommandError(f"cannot start the demo: {err}") from err

    ports = [broker.port, broker.controller_port, *Ports(settings.base_port).all(
        2 * (settings.fast_servers + settings.slow_servers))]
    problems = preflight.problems(traces, broker, ports, [settings.state_dir, settings.report_dir])
    if problems:
        raise CommandError("cannot start the demo:\n" + "\n".join(f"- {p}" for p in problems))
    from headroom.demo.report import write_report
    from headroom.demo.view import live_panel, summary_tables

    signal.signal(signal.SIGTERM, _stop)  # so a terminated demo still shuts its processes down
    console = Console()
    console.print(f"headroom demo: two identical simulated pools, the same Azure conversation trace through both for "
                  f"{settings.duration_s:g} s ({played.load * played.capacity():.1f} req/s) — one routed by headroom, "
                  f"one by the heuristic profile. {played.describe()}. Starting:")
    demo = Demo(settings, on_ready=lambda name, seconds: console.print(f"  {name:<24} ready after {seconds:5.1f} s"))
    interrupted = False
    try:
        demo.start()
        console.print(f"load: {settings.duration_s:g} s through both arms (Ctrl-C stops early with a partial report)")
        with Live(console=console, refresh_per_second=2, transient=False) as live:
            demo.drive(on_tick=lambda tick: live.update(live_panel(tick)))
    except KeyboardInterrupt:
        interrupted = True
        console.print("\ninterrupted: stopping every component and writing a partial report…")
    except (BrokerError, ComponentFailed) as err:
        demo.stop()
        raise CommandError(str(err)) from err
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # nothing may stop the shutdown half way
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    report, evidence = demo.finish(interrupted)
    console.print(summary_tables(report))
    path = write_report(report, evidence, settings.report_dir)
    console.print(f"{'partial report' if interrupted else 'report'}: {path}  ({report.seconds:.0f} s in all)")
    return 130 if interrupted else 0


def _stop(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
