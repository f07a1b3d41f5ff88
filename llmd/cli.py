"""``headroom llmd training-server`` — llm-d's training API, backed by headroom (its prediction API is served by
``headroom predictor serve --http-port``)."""

from __future__ import annotations

import logging

from headroom.cli.environment import reads
from headroom.contract.settings import SettingsError, from_env
from headroom.contract.topics import KafkaSettings
from headroom.llmd.settings import TrainingApiSettings


def register(subparsers) -> None:
    group = subparsers.add_parser("llmd", help="a drop-in for llm-d's latency predictor sidecars")
    commands = group.add_subparsers(dest="llmd_command", required=True, metavar="COMMAND")
    training = commands.add_parser("training-server", help="llm-d's training API: samples to the telemetry topic",
                                   **reads(TrainingApiSettings, KafkaSettings))
    training.add_argument("--port", type=int, help="HTTP port (overrides HEADROOM_LLMD_TRAINING_PORT)")
    training.add_argument("--bootstrap", help="Kafka bootstrap servers (overrides HEADROOM_KAFKA_BOOTSTRAP)")
    training.set_defaults(run=run_training_server)


def run_training_server(args) -> int:
    from headroom.errors import CommandError
    from headroom.llmd.training_server import serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = from_env(TrainingApiSettings, **({"port": args.port} if args.port is not None else {}))
        kafka = from_env(KafkaSettings, **({"bootstrap_servers": args.bootstrap} if args.bootstrap else {}))
    except SettingsError as err:
        raise CommandError(str(err)) from err
    try:
        return serve(settings, kafka)
    except OSError as err:
        raise CommandError(f"cannot start llm-d's training API: {err}") from err
