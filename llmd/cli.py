"""``headroom llmd training-server | sidecar`` — llm-d's training API, and either of its sidecars as the
reference's Helm chart starts them (llm-d's prediction API is served by ``headroom predictor serve --http-port``)."""

from __future__ import annotations

import argparse
import logging

from headroom.cli.environment import reads
from headroom.contract.settings import SettingsError, from_env
from headroom.contract.topics import KafkaSettings
from headroom.llmd.settings import TrainingApiSettings
from headroom.llmd.sidecar import SidecarSettings
from headroom.predictor.settings import PredictorSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = subparsers.add_parser("llmd", help="a drop-in for llm-d's latency predictor sidecars")
    commands = group.add_subparsers(dest="llmd_command", required=True, metavar="COMMAND")
    training = commands.add_parser("training-server", help="llm-d's training API: samples to the telemetry topic",
                                   **reads(TrainingApiSettings, KafkaSettings))
    training.add_argument("--port", type=int, help="HTTP port (overrides HEADROOM_LLMD_TRAINING_PORT)")
    training.add_argument("--bootstrap", help="Kafka bootstrap servers (overrides HEADROOM_KAFKA_BOOTSTRAP)")
    training.set_defaults(run=run_training_server)
    sidecar = commands.add_parser(
        "sidecar", help="a sidecar of llm-d's latency predictor, as its Helm chart starts one: `-- "
                        "prediction_server:app --port P` or `-- training_server:app` (or SERVER_TYPE)",
        **reads(SidecarSettings, PredictorSettings, TrainingApiSettings, KafkaSettings))
    sidecar.add_argument("args", nargs=argparse.REMAINDER, help="uvicorn's arguments, after --")
    sidecar.set_defaults(run=run_sidecar)


def run_training_server(args: argparse.Namespace) -> int:
    from headroom.errors import CommandError
    from headroom.llmd.training_server import serve
    from headroom.router.errors import ConfigError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = from_env(TrainingApiSettings, **({"port": args.port} if args.port is not None else {}))
        kafka = from_env(KafkaSettings, **({"bootstrap_servers": args.bootstrap} if args.bootstrap else {}))
        return serve(settings, kafka)
    except (SettingsError, ConfigError) as err:
        raise CommandError(str(err)) from err
    except OSError as err:
        raise CommandError(f"cannot start llm-d's training API: {err}") from err


def run_sidecar(args: argparse.Namespace) -> int:
    from headroom.errors import CommandError
    from headroom.llmd.sidecar import run
    from headroom.router.errors import ConfigError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return run(args.args)
    except (SettingsError, ConfigError) as err:
        raise CommandError(str(err)) from err
    except OSError as err:
        raise CommandError(f"cannot start the sidecar: {err}") from err
