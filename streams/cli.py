"""``headroom worker start`` — the learning pipeline worker (a Faust worker on the real broker)."""

from __future__ import annotations

import argparse
import dataclasses
import logging

from headroom.cli.environment import reads
from headroom.contract.settings import SettingsError, from_env
from headroom.contract.topics import KafkaSettings
from headroom.errors import CommandError
from headroom.streams.settings import PipelineSettings

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    group = subparsers.add_parser("worker", help="run the learning pipeline (telemetry → windows → models)")
    commands = group.add_subparsers(dest="worker_command", required=True, metavar="ACTION")
    start = commands.add_parser("start", help="consume telemetry, keep windows, retrain and publish models",
                                **reads(PipelineSettings, KafkaSettings))
    start.add_argument("--app-id", help="Faust app id (consumer group, changelog prefix)")
    start.add_argument("--metrics-port", type=int, help="Prometheus port (0: off)")
    start.add_argument("--log-level", choices=("crit", "error", "warn", "info", "debug"))
    start.set_defaults(run=run_start)


def settings_from(args: argparse.Namespace) -> tuple[KafkaSettings, PipelineSettings]:
    overrides = {name: value for name, value in (("app_id", args.app_id), ("metrics_port", args.metrics_port),
                                                 ("log_level", args.log_level)) if value is not None}
    try:
        return from_env(KafkaSettings), from_env(PipelineSettings, **overrides)
    except (SettingsError, ValueError) as err:
        raise CommandError(str(err)) from err


def run_start(args: argparse.Namespace) -> int:
    kafka, settings = settings_from(args)
    return start_worker(kafka, settings)


def start_worker(kafka: KafkaSettings, settings: PipelineSettings) -> int:
    """Warm-start from ``model-updates``, then run the Faust worker until it is stopped."""
    import faust
    from confluent_kafka import KafkaException
    from prometheus_client import start_http_server

    from headroom.localkafka.admin import ensure_topics, partition_count
    from headroom.model_topic import read_latest
    from headroom.streams.app import create_topology
    from headroom.trainer.live import LiveModels
    from headroom.trainer.publish import ModelPublisher

    try:
        ensure_topics(kafka)
        partitions = partition_count(kafka, kafka.telemetry_topic)
        latest, rejected = read_latest(kafka)
    except (KafkaException, TimeoutError) as err:
        raise CommandError(f"cannot reach Kafka at {kafka.bootstrap_servers}: {err}") from err
    if partitions != kafka.telemetry_partitions:
        print(f"{kafka.telemetry_topic!r} has {partitions} partitions (settings say {kafka.telemetry_partitions}); "
              f"the window table follows the topic", flush=True)
        kafka = dataclasses.replace(kafka, telemetry_partitions=partitions)
    live = LiveModels(latest.values())
    print(f"warm start: {len(latest)} live model(s) from {kafka.model_topic!r}"
          + "".join(f"\n  {key} v{version}" for key, version in sorted(live.versions().items()))
          + (f"; skipped {len(rejected)} invalid message(s)" if rejected else ""), flush=True)
    topology = create_topology(kafka, settings, live, ModelPublisher(kafka))
    if settings.metrics_port:
        try:
            start_http_server(settings.metrics_port, addr=settings.metrics_host)
        except OSError as err:
            raise CommandError(f"metrics port {settings.metrics_port}: {err}") from err
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    worker = faust.Worker(topology.app, loglevel=settings.log_level, redirect_stdouts=False)
    try:
        worker.execute_from_commandline()
    except SystemExit as stop:
        return int(stop.code or 0)
    return 0


