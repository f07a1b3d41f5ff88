"""``headroom backtest run`` — replay telemetry history and write a report of models and routing policies."""

from __future__ import annotations

import argparse
import dataclasses
import os
from datetime import UTC, datetime
from pathlib import Path

from headroom.cli.environment import environment_help
from headroom.contract.settings import SettingsError, describe, from_env
from headroom.contract.signing import SigningSettings
from headroom.contract.topics import KafkaSettings
from headroom.errors import CommandError


def register(subparsers: argparse._SubParsersAction) -> None:
    from headroom.backtest.settings import BacktestSettings
    from headroom.streams.settings import PipelineSettings

    group = subparsers.add_parser("backtest", help="replay telemetry history: model versions, drift, policies")
    commands = group.add_subparsers(dest="backtest_command", required=True, metavar="ACTION")
    names = ", ".join(name for name, *_ in describe(PipelineSettings))
    run = commands.add_parser(
        "run", help="replay a range of the telemetry topic and write a report directory",
        epilog=f"Pipeline settings come from the environment as for 'headroom worker start', or --pipeline "
               f"NAME=VALUE with NAME one of: {names}.\n\n" + environment_help(BacktestSettings, KafkaSettings,
                                                                             SigningSettings, PipelineSettings),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--bootstrap", help="Kafka bootstrap servers (default: HEADROOM_KAFKA_BOOTSTRAP)")
    run.add_argument("--telemetry-topic", help="telemetry topic (default: HEADROOM_TOPIC_TELEMETRY)")
    run.add_argument("--model-topic", help="model-update topic (default: HEADROOM_TOPIC_MODELS)")
    run.add_argument("--from", dest="start", type=_time_ms, help="first record time: ISO-8601 (UTC) or unix ms")
    run.add_argument("--to", dest="end", type=_time_ms, help="end record time (exclusive): ISO-8601 or unix ms")
    run.add_argument("--start-offset", type=int, help="first offset, in every partition (instead of --from)")
    run.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE", type=_kafka_option,
                     help="extra librdkafka consumer setting, e.g. fetch.max.bytes=... (repeatable); security comes "
                          "from HEADROOM_KAFKA_* and secrets never from the command line")
    run.add_argument("--pipeline", action="append", default=[], metavar="NAME=VALUE", type=_pair,
                     help="override one pipeline setting for the replay (repeatable)")
    run.add_argument("--out", type=Path, help="report directory (default: HEADROOM_BACKTEST_OUT)")
    run.add_argument("--policies", help="comma-separated simulator policies to compare ('' to skip)")
    run.add_argument("--servers", type=int, help="simulated servers (0: as many as the records name)")
    run.set_defaults(run=run_backtest_command)


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


SECRET_MARKS = ("password", "secret", "ssl.key.pem", "sasl.oauthbearer.config")  # librdkafka options holding secrets


def _kafka_option(text: str) -> tuple[str, str]:
    key, value = _pair(text)
    if any(mark in key for mark in SECRET_MARKS):
        raise argparse.ArgumentTypeError(f"{key} is a secret: it is never taken from the command line (where "
                                         f"process lists and shell histories show it); set "
                                         f"HEADROOM_KAFKA_SASL_PASSWORD_FILE and the other HEADROOM_KAFKA_* settings")
    return key, value


def _time_ms(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r} is neither unix milliseconds nor an ISO-8601 time") from err
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def pipeline_settings(overrides: list[tuple[str, str]]):
    """Pipeline settings from the environment, with ``NAME=VALUE`` overrides parsed as the environment's are."""
    from headroom.streams.settings import PipelineSettings

    env_of = {name: env for name, env, _, _ in describe(PipelineSettings)}
    environ = dict(os.environ)
    for name, value in overrides:
        if name not in env_of:
            raise CommandError(f"--pipeline {name}: no such pipeline setting; known: {', '.join(env_of)}")
        environ[env_of[name]] = value
    try:
        return from_env(PipelineSettings, environ)
    except (SettingsError, ValueError) as err:
        raise CommandError(str(err)) from err


def run_backtest_command(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from headroom.backtest.replay import Range, Source
    from headroom.backtest.run import run_backtest
    from headroom.backtest.settings import BacktestSettings

    if args.start is not None and args.start_offset is not None:
        raise CommandError("--from and --start-offset both choose the start; give one")
    try:
        kafka = from_env(KafkaSettings)
        settings = from_env(BacktestSettings)
        trust = from_env(SigningSettings).trust()
    except SettingsError as err:
        raise CommandError(str(err)) from err
    kafka = dataclasses.replace(kafka, **{k: v for k, v in (
        ("bootstrap_servers", args.bootstrap), ("telemetry_topic", args.telemetry_topic),
        ("model_topic", args.model_topic)) if v is not None})
    settings = dataclasses.replace(settings, **{k: v for k, v in (
        ("out_dir", args.out), ("policies", args.policies), ("servers", args.servers)) if v is not None})
    source = Source(kafka, trust, Range(start_ms=args.start, end_ms=args.end, start_offset=args.start_offset),
                    dict(args.kafka_option))
    try:
        result = run_backtest(source, pipeline_settings(args.pipeline), settings)
    except (KafkaException, TimeoutError, ValueError) as err:
        raise CommandError(f"cannot backtest {kafka.telemetry_topic!r} at {kafka.bootstrap_servers}: {err}") from err
    rounds = result.prequential.rounds
    promoted = int(rounds["promoted"].sum()) if rounds.height else 0
    print(f"{result.records.height} records; {promoted} versions promoted, {rounds.height - promoted} rejected, "
          f"{result.prequential.drifts.height} drift detections; report in {settings.out_dir / 'report.md'}")
    return 0
