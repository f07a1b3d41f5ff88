"""``headroom kafka up|down|status|check`` — the local broker (``up --secure``: with TLS, users and ACLs);
``headroom kafka topics`` — any broker's topics."""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from confluent_kafka import KafkaException
from rich.console import Console
from rich.table import Table

from headroom import kafka_topics
from headroom.cli.environment import reads
from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.errors import CommandError
from headroom.localkafka import acls, broker, security
from headroom.localkafka.errors import BrokerError
from headroom.localkafka.selftest import round_trip, synthetic_records
from headroom.localkafka.settings import BrokerSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = subparsers.add_parser("kafka", help="run a local Kafka broker (KRaft) on 127.0.0.1")
    commands = group.add_subparsers(dest="kafka_command", required=True, metavar="ACTION")
    for name, run, text in (("up", _up, "start the broker (idempotent) and create the topics"),
                            ("down", _down, "stop the broker"),
                            ("status", _status, "say whether the broker runs and answers"),
                            ("check", _check, "send synthetic telemetry through the broker and read it back")):
        parser = commands.add_parser(name, help=text, **reads(BrokerSettings, KafkaSettings))
        parser.add_argument("--state-dir", type=Path, help="folder for broker data, log and pid file "
                            "(default $HEADROOM_STATE_DIR or .headroom)")
        parser.set_defaults(run=run)
        if name == "up":
            parser.add_argument("--secure", action="store_true", default=None,
                                help="TLS listeners, SCRAM / PLAIN / OAUTHBEARER / certificate users and ACLs "
                                     "(HEADROOM_KAFKA_SECURE); each component's settings go to "
                                     "<state-dir>/kafka/security/clients/<user>.env")
            parser.add_argument("--worker-app-id", help="the learning worker's app id, whose changelog topics and "
                                "groups its principal owns (default $HEADROOM_PIPELINE_APP_ID)")
        if name == "check":
            parser.add_argument("--records", type=int, default=5000, help="telemetry records to send")
            parser.add_argument("--servers", type=int, default=8, help="servers the records are spread over")
    topics = commands.add_parser("topics", help="create the declared topics on the broker of HEADROOM_KAFKA_BOOTSTRAP "
                                 "(any cluster) and report those that differ from their declaration",
                                 **reads(KafkaSettings))
    topics.add_argument("--alter", action="store_true", help="give drifted topics their declared configuration")
    topics.set_defaults(run=_topics)
    strimzi = commands.add_parser("strimzi", help="write the Strimzi KafkaTopics and KafkaUsers (with their ACLs) "
                                  "of the declared topics", **reads(KafkaSettings))
    strimzi.add_argument("--out", type=Path, required=True, help="folder for topics.yaml and users.yaml")
    strimzi.add_argument("--authentication", choices=("tls", "scram-sha-512"), default="tls",
                         help="how the users authenticate (default: mutual TLS)")
    strimzi.set_defaults(run=_strimzi)


def _worker_app_id(given: str | None) -> str:
    if given:
        return given
    from headroom.streams.settings import PipelineSettings
    return from_env(PipelineSettings).app_id


def settings_from(args: argparse.Namespace) -> BrokerSettings:
    """The broker's settings; a broker whose state was made secure is secure for every command but ``up``."""
    settings = from_env(BrokerSettings)
    overrides = {"state_dir": args.state_dir, "secure": getattr(args, "secure", None)}
    settings = replace(settings, **{name: value for name, value in overrides.items() if value is not None})
    if args.kafka_command != "up" and security.layout(settings).ca.exists():
        settings = replace(settings, secure=True)
    return settings


def start(settings: BrokerSettings, worker_app_id: str | None = None) -> tuple[broker.Status, list[str]]:
    """Bring the broker up and create the declared topics on it (in secure mode as ``admin``, with the ACLs of
    :mod:`localkafka.acls`)."""
    status = broker.up(settings)
    kafka = security.client(settings, "admin", base=from_env(KafkaSettings))
    created = kafka_topics.ensure_topics(kafka)
    if settings.secure:
        acls.apply(kafka, kafka, _worker_app_id(worker_app_id))
    return status, created


def _up(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    began = time.monotonic()
    try:
        status, created = start(settings, args.worker_app_id)
    except (BrokerError, KafkaException) as err:
        raise CommandError(str(err)) from err
    print(f"Kafka is up on {status.bootstrap} (pid {status.pid}) after {time.monotonic() - began:.1f} s; "
          f"log {status.log_file}")
    if created:
        print(f"created topics: {', '.join(created)}")
    if settings.secure:
        files = security.layout(settings)
        print(f"secure: SASL_SSL on {settings.bootstrap}, certificate-authenticated TLS on 127.0.0.1:"
              f"{settings.ssl_port}, ACLs on; CA {files.ca}\nconnect as a component with its settings, e.g. "
              f"`set -a; . {files.env_file('headroom-router')}; set +a` (users: {', '.join(security.users())})")
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = broker.down(settings_from(args))
    print("Kafka stopped" if stopped else "Kafka was not running")
    return 0


def _status(args: argparse.Namespace) -> int:
    status = broker.status(settings_from(args))
    if not status.running:
        print("Kafka is not running")
        return 3
    state = "answering" if status.answering else "NOT answering"
    print(f"Kafka is running on {status.bootstrap} (pid {status.pid}), {state}; log {status.log_file}")
    return 0 if status.answering else 1


def _topics(args: argparse.Namespace) -> int:
    kafka = from_env(KafkaSettings)
    if not kafka_topics.answers(kafka):
        raise CommandError(f"no broker answers on {kafka.bootstrap_servers} (HEADROOM_KAFKA_BOOTSTRAP)")
    created = kafka_topics.ensure_topics(kafka, alter=args.alter)
    drifts = kafka_topics.topic_drift(kafka)
    print(f"created: {', '.join(created) or 'none'}")
    for drift in drifts:
        print(drift.describe())
    return 1 if drifts else 0


def _strimzi(args: argparse.Namespace) -> int:
    from headroom.localkafka.strimzi import write
    for path in write(args.out, from_env(KafkaSettings), args.authentication):
        print(f"wrote {path}")
    return 0


def _check(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    if not broker.status(settings).answering:
        raise CommandError(f"no broker answers on {settings.bootstrap}; run `headroom kafka up` first")
    kafka = security.client(settings, "admin", base=from_env(KafkaSettings))
    summary = round_trip(kafka, synthetic_records(args.records, args.servers, seed=1))
    console = Console()
    table = Table(title=f"telemetry read back from '{kafka.telemetry_topic}'")
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
