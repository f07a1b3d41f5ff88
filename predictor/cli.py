"""``headroom predictor serve`` (its benchmarks are ``headroom bench predictor``)."""

from __future__ import annotations

import argparse
import logging

from headroom.cli.environment import reads
from headroom.contract.settings import SettingsError, from_env
from headroom.contract.topics import KafkaSettings
from headroom.predictor.settings import PredictorSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    group = subparsers.add_parser("predictor", help="prediction servers over gRPC")
    commands = group.add_subparsers(dest="predictor_command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="run one prediction server until SIGTERM",
                                **reads(PredictorSettings, KafkaSettings))
    serve.add_argument("--host", help="address to bind, e.g. 0.0.0.0 for every interface (overrides "
                                      "HEADROOM_PREDICTOR_HOST; default loopback)")
    serve.add_argument("--port", type=int, help="gRPC port (overrides HEADROOM_PREDICTOR_PORT)")
    serve.add_argument("--metrics-port", type=int, help="metrics port (overrides HEADROOM_PREDICTOR_METRICS_PORT)")
    serve.add_argument("--bootstrap", help="Kafka bootstrap servers (overrides HEADROOM_KAFKA_BOOTSTRAP)")
    serve.add_argument("--models", metavar="PATH",
                       help="serve the model-update file or folder at PATH, reloading it when it changes, without a "
                            "broker (overrides HEADROOM_PREDICTOR_MODELS)")
    serve.add_argument("--tail", action="store_true",
                       help="with --models: tail model-updates on the broker too (HEADROOM_PREDICTOR_TAIL_WITH_MODELS)")
    serve.add_argument("--http-port", type=int,
                       help="serve llm-d's prediction API over HTTP on this port "
                            "(overrides HEADROOM_PREDICTOR_HTTP_PORT)")
    serve.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from headroom.errors import CommandError
    from headroom.predictor.server import serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port), ("metrics_port", args.metrics_port),
                                   ("models", args.models), ("http_port", args.http_port),
                                   ("tail_with_models", args.tail or None))
                 if v is not None}
    try:
        settings = from_env(PredictorSettings, **overrides)
        kafka = _kafka(args)
        return serve(settings, kafka)
    except SettingsError as err:
        raise CommandError(str(err)) from err
    except (OSError, ValueError) as err:
        raise CommandError(f"cannot start the predictor: {err}") from err


def _kafka(args: argparse.Namespace) -> KafkaSettings:
    return from_env(KafkaSettings, **({"bootstrap_servers": args.bootstrap} if args.bootstrap else {}))
