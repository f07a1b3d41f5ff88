"""``headroom backtest run`` — replay telemetry history and write a report of models and routing policies."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from headroom.cli.environment import environment_help
from headroom.contract.settings import SettingsError, describe, from_env
from headroom.contract.signing import SigningSettings, TrustedKeys
from headroom.contract.topics import KafkaSettings
from headroom.errors import CommandError

if TYPE_CHECKING:  # the command's modules are imported when it runs, not when the CLI starts
    from headroom.backtest.replay import Source
    from headroom.backtest.result import Backtest
    from headroom.backtest.settings import BacktestSettings
    from headroom.streams.settings import PipelineSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    _source_options(run)
    run.add_argument("--out", type=Path, help="report directory (default: HEADROOM_BACKTEST_OUT)")
    run.add_argument("--policies", help="comma-separated simulator policies to compare ('' to skip)")
    run.add_argument("--servers", type=int, help="simulated servers (0: as many as the records name)")
    run.set_defaults(run=run_backtest_command)

    worker = commands.add_parser(
        "worker", help="join a group of backtest workers, backtest the partitions it assigns, write their parts",
        description="Backtest workers share the telemetry topic's partitions (hence its pools) out as one Kafka "
                    "consumer group; each writes a part per partition into --parts (a folder every worker reaches) "
                    "and commits it to the group. Start them together with the same options; then merge.",
        epilog=run.epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    _source_options(worker)
    worker.add_argument("--group", required=True, help="the workers' consumer group: one per backtest")
    worker.add_argument("--parts", type=Path, required=True, help="folder of the parts")
    worker.add_argument("--settle", type=float, default=3.0,
                        help="seconds the assignment must hold before the work starts (default 3)")
    worker.set_defaults(run=worker_command)

    merge = commands.add_parser("merge", help="merge the parts of a group's backtest into one report",
                                epilog=environment_help(BacktestSettings, KafkaSettings, SigningSettings),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    merge.add_argument("--parts", type=Path, required=True, help="folder of the parts")
    merge.add_argument("--bootstrap", help="Kafka bootstrap servers (default: HEADROOM_KAFKA_BOOTSTRAP)")
    merge.add_argument("--model-topic", help="model-update topic (default: HEADROOM_TOPIC_MODELS)")
    merge.add_argument("--pipeline", action="append", default=[], metavar="NAME=VALUE", type=_pair,
                       help="the pipeline settings the workers ran with (as given to them)")
    merge.add_argument("--out", type=Path, help="report directory (default: HEADROOM_BACKTEST_OUT)")
    merge.set_defaults(run=merge_command)


def _source_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (default: HEADROOM_KAFKA_BOOTSTRAP)")
    parser.add_argument("--telemetry-topic", help="telemetry topic (default: HEADROOM_TOPIC_TELEMETRY)")
    parser.add_argument("--model-topic", help="model-update topic (default: HEADROOM_TOPIC_MODELS)")
    parser.add_argument("--from", dest="start", type=_time_ms, help="first record time: ISO-8601 (UTC) or unix ms")
    parser.add_argument("--to", dest="end", type=_time_ms, help="end record time (exclusive): ISO-8601 or unix ms")
    parser.add_argument("--start-offset", type=int, help="first offset, in every partition (instead of --from)")
    parser.add_argument("--kafka-option", action="append", default=[], metavar="KEY=VALUE", type=_kafka_option,
                        help="extra librdkafka consumer setting, e.g. fetch.max.bytes=... (repeatable); security "
                             "comes from HEADROOM_KAFKA_* and secrets never from the command line")
    parser.add_argument("--pipeline", action="append", default=[], metavar="NAME=VALUE", type=_pair,
                        help="override one pipeline setting for the replay (repeatable)")
    parser.add_argument("--processes", type=int, help="processes fitting training rounds (0: one per core; 1: in "
                                                      "this process; default: HEADROOM_BACKTEST_PROCESSES)")


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


def pipeline_settings(overrides: list[tuple[str, str]]) -> PipelineSettings:
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


def quiet_clients() -> None:
    """Keep the Kafka client library's own lines out of the terminal: a failure ends the command with one line
    that names it (they still reach the ``headroom.backtest.librdkafka`` logger's handlers at debug level)."""
    from headroom.backtest.replay import LIBRDKAFKA_LOG

    LIBRDKAFKA_LOG.setLevel(logging.CRITICAL + 1)


def _settings(args: argparse.Namespace,
              reads_models: bool = True) -> tuple[KafkaSettings, BacktestSettings, TrustedKeys]:
    """The Kafka settings, backtest settings and trusted keys of a command, with its flags laid over (a command
    that does not read the model topic needs no trusted keys)."""
    from headroom.backtest.settings import BacktestSettings

    try:
        kafka = from_env(KafkaSettings)
        settings = from_env(BacktestSettings)
        trust = from_env(SigningSettings).trust() if reads_models else TrustedKeys()
    except (SettingsError, ValueError) as err:
        raise CommandError(str(err)) from err
    kafka = dataclasses.replace(kafka, **{k: v for k, v in (
        ("bootstrap_servers", args.bootstrap), ("telemetry_topic", getattr(args, "telemetry_topic", None)),
        ("model_topic", args.model_topic)) if v is not None})
    settings = dataclasses.replace(settings, **{k: v for k, v in (
        ("out_dir", getattr(args, "out", None)), ("policies", getattr(args, "policies", None)),
        ("servers", getattr(args, "servers", None)), ("processes", getattr(args, "processes", None)))
        if v is not None})
    return kafka, settings, trust


def _source(args: argparse.Namespace, kafka: KafkaSettings, trust: TrustedKeys) -> Source:
    from headroom.backtest.replay import Range, Source

    if args.start is not None and args.start_offset is not None:
        raise CommandError("--from and --start-offset both choose the start; give one")
    return Source(kafka, trust, Range(start_ms=args.start, end_ms=args.end, start_offset=args.start_offset),
                  dict(args.kafka_option))


def _failures() -> tuple[type[Exception], ...]:
    from confluent_kafka import KafkaException

    return KafkaException, TimeoutError, ValueError


def _summary(result: Backtest, out: Path) -> str:
    rounds = result.prequential.rounds
    promoted = int(rounds["promoted"].sum()) if rounds.height else 0
    return (f"{result.prequential.records} records; {promoted} versions promoted, {rounds.height - promoted} "
            f"rejected, {result.prequential.drifts.height} drift detections; report in {out / 'report.md'}")


def run_backtest_command(args: argparse.Namespace) -> int:
    from headroom.backtest.run import run_backtest

    quiet_clients()
    kafka, settings, trust = _settings(args)
    source = _source(args, kafka, trust)
    try:
        result = run_backtest(source, pipeline_settings(args.pipeline), settings)
    except _failures() as err:
        raise CommandError(f"cannot backtest {kafka.telemetry_topic!r} at {kafka.bootstrap_servers}: {err}") from err
    print(_summary(result, settings.out_dir))
    return 0


def worker_command(args: argparse.Namespace) -> int:
    from headroom.backtest.group import run_worker

    quiet_clients()
    kafka, settings, trust = _settings(args, reads_models=False)  # the merge reads the published history
    source = _source(args, kafka, trust)
    pipeline = pipeline_settings(args.pipeline)
    try:
        written = run_worker(source, pipeline, args.parts, args.group, processes=settings.training_processes,
                             settle_s=args.settle,
                             progress=lambda what: print(f"backtesting {what}", file=sys.stderr, flush=True))
    except _failures() as err:
        raise CommandError(f"cannot backtest {kafka.telemetry_topic!r} at {kafka.bootstrap_servers} in group "
                           f"{args.group!r}: {err}") from err
    print(f"parts of partitions {written} written to {args.parts}" if written else
          f"no partition of {kafka.telemetry_topic!r} was left for this worker of group {args.group!r}")
    return 0


def merge_command(args: argparse.Namespace) -> int:
    from headroom.backtest.run import report_parts

    quiet_clients()
    kafka, settings, trust = _settings(args)
    try:
        result = report_parts(args.parts, kafka, trust, pipeline_settings(args.pipeline), settings)
    except _failures() as err:
        raise CommandError(f"cannot merge the parts in {args.parts}: {err}") from err
    print(_summary(result, settings.out_dir))
    return 0
