"""``headroom worker start`` — the learning pipeline worker (a Faust worker on the real broker)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections import Counter

from headroom.cli.environment import reads
from headroom.contract.settings import SettingsError, from_env
from headroom.contract.signing import SigningKey, SigningSettings, TrustedKeys
from headroom.contract.topics import KafkaSettings
from headroom.errors import CommandError
from headroom.streams.settings import PipelineSettings

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = subparsers.add_parser("worker", help="run the learning pipeline (telemetry → windows → models)")
    commands = group.add_subparsers(dest="worker_command", required=True, metavar="ACTION")
    start = commands.add_parser("start", help="consume telemetry, keep windows, retrain and publish models",
                                **reads(PipelineSettings, KafkaSettings, SigningSettings))
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


def signing_from(signing: SigningSettings) -> tuple[SigningKey | None, TrustedKeys]:
    """The worker's signing key and the keys it trusts (its own among them); without a key the worker
    publishes unsigned models, which only readers that allow them will serve, so it must be allowed."""
    try:
        key = signing.signing_key()
        if key is None and not signing.allow_unsigned:
            raise SettingsError("the worker signs every model it publishes: set HEADROOM_MODEL_SIGNING_KEY_FILE to "
                                "its private key (`headroom models keygen` makes a pair)")
        return key, signing.trust(own=key)
    except SettingsError as err:
        raise CommandError(str(err)) from err


def run_start(args: argparse.Namespace) -> int:
    kafka, settings = settings_from(args)
    return start_worker(kafka, settings, from_env(SigningSettings))


def start_worker(kafka: KafkaSettings, settings: PipelineSettings, signing: SigningSettings) -> int:
    """Warm-start from ``model-updates``, then run the Faust worker until it is stopped."""
    import faust
    from confluent_kafka import KafkaException
    from prometheus_client import start_http_server

    from headroom.kafka_clients import why
    from headroom.kafka_topics import ensure_topics, partition_count
    from headroom.model_topic import read_latest
    from headroom.streams.app import create_topology
    from headroom.streams.state_topic import state_spec
    from headroom.trainer.live import LiveModels

    key, trust = signing_from(signing)
    if settings.trees > trust.bounds.max_trees:
        raise CommandError(f"HEADROOM_TRAIN_TREES={settings.trees} is over HEADROOM_MODEL_MAX_TREES="
                           f"{trust.bounds.max_trees}: prediction servers and routers would reject every model")
    if key is None:
        print("HEADROOM_MODEL_ALLOW_UNSIGNED: publishing UNSIGNED models; readers that require signatures will "
              "reject them", flush=True)
    try:
        ensure_topics(kafka)
        partitions = partition_count(kafka, kafka.telemetry_topic)
        ensure_topics(kafka, [state_spec(settings.app_id, partitions)])
        latest, rejected = read_latest(kafka, trust)
    except (KafkaException, TimeoutError) as err:
        raise CommandError(f"cannot reach Kafka at {kafka.bootstrap_servers}: {why(err)}") from err
    if partitions != kafka.telemetry_partitions:
        print(f"{kafka.telemetry_topic!r} has {partitions} partitions (settings say {kafka.telemetry_partitions}); "
              f"the window table follows the topic", flush=True)
        kafka = dataclasses.replace(kafka, telemetry_partitions=partitions)
    live = LiveModels(latest.values())
    print(f"warm start: {len(latest)} live model(s) from {kafka.model_topic!r}"
          + "".join(f"\n  {key} v{version}" for key, version in sorted(live.versions().items()))
          + (f"; skipped {len(rejected)} rejected message(s): "
             + ", ".join(f"{n} {reason}" for reason, n in Counter(r.reason for r in rejected).items())
             if rejected else "")
          + (f"; signing as key {key.key_id}" if key else ""), flush=True)
    topology = create_topology(kafka, settings, live, key, trust)
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


