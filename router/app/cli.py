"""``headroom router serve``: the router (its decision latency is ``headroom bench router``)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from headroom.cli.environment import reads
from headroom.contract.topics import KafkaSettings
from headroom.errors import CommandError
from headroom.router.app.settings import RouterSettings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("router", help="route requests by predicted latency: OpenAI-compatible proxy, Pick API, "
                                                     "Envoy ext_proc")
    commands = parser.add_subparsers(dest="router_command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="run the proxy, Pick API and ext_proc server until SIGTERM",
                                **reads(RouterSettings, KafkaSettings))
    serve.add_argument("--config", type=Path, required=True, help="Router config (YAML).")
    serve.set_defaults(run=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from headroom.contract.settings import SettingsError, from_env
    from headroom.contract.topics import KafkaSettings
    from headroom.router.app.config import load_config
    from headroom.router.app.server import RouterServer, serve
    from headroom.router.errors import ConfigError
    try:
        server = RouterServer(load_config(args.config), from_env(KafkaSettings))
    except (ConfigError, SettingsError) as err:  # also the token file, trusted keys and TLS files it reads
        raise CommandError(str(err)) from err
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        serve(server)
    except ConfigError as err:
        raise CommandError(str(err)) from err
    return 0
