"""``headroom demo`` — start the local broker, send telemetry through it, print what came back."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from cli.main import CommandError
from contract.settings import from_env
from contract.topics import KafkaSettings
from demo.telemetry_roundtrip import round_trip, synthetic_records
from localkafka import broker
from localkafka.cli import start
from localkafka.errors import BrokerError
from localkafka.settings import BrokerSettings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="run headroom end to end on a local Kafka broker")
    parser.add_argument("--records", type=int, default=5000, help="telemetry records to send (default 5000)")
    parser.add_argument("--servers", type=int, default=8, help="simulated servers (default 8)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep-kafka", action="store_true", help="leave the broker running afterwards")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    console = Console()
    broker_settings = from_env(BrokerSettings)
    was_running = broker.status(broker_settings).running
    try:
        with console.status("starting the local Kafka broker"):
            status, _ = start(broker_settings)
    except BrokerError as err:
        raise CommandError(str(err)) from err
    console.print(f"Kafka on {status.bootstrap} (pid {status.pid})")
    try:
        settings = from_env(KafkaSettings, bootstrap_servers=broker_settings.bootstrap)
        records = synthetic_records(args.records, args.servers, args.seed)
        with console.status(f"sending {len(records)} telemetry records through Kafka"):
            summary = round_trip(settings, records)
    finally:
        if not (was_running or args.keep_kafka):
            broker.down(broker_settings)
    table = Table(title=f"telemetry read back from '{settings.telemetry_topic}'")
    for column in ("server", "records", "mean TTFT ms", "mean TPOT ms"):
        table.add_column(column, justify="right")
    for server, (count, ttft, tpot) in summary.by_server.items():
        table.add_row(server, str(count), f"{ttft:.1f}", f"{tpot:.2f}")
    console.print(table)
    console.print(f"produced {summary.produced} in {summary.produce_s:.2f} s, consumed {summary.consumed} "
                  f"in {summary.consume_s:.2f} s, duplicates {summary.duplicates}")
    if summary.consumed != summary.produced or summary.duplicates:
        raise CommandError("telemetry was lost or duplicated on the way through Kafka")
    return 0
