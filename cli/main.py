"""``headroom`` — the one command-line entry point. Each subcommand group lives in its package's ``cli``
module as ``register(subparsers)``; this module only lists them."""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap

from headroom import __version__
from headroom.cli.environment import environment_help
from headroom.errors import CommandError
from headroom.process import ProcessSettings, configure

DESCRIPTION = ("headroom routes LLM inference requests across a pool of model servers by predicted latency, learns "
               "its latency models online from the pool's telemetry over Kafka, and tells operators how to "
               "autoscale the pool. 'headroom COMMAND --help' tells more about each command and the environment "
               "variables it reads.")

# One line per subcommand group: (module with register(subparsers)).
COMMANDS = (
    "headroom.localkafka.cli",
    "headroom.predictor.cli",
    "headroom.demo.cli",
    "headroom.streams.cli",
    "headroom.trainer.cli",
    "headroom.autoscale.cli",
    "headroom.router.app.cli",
    "headroom.sim.cli",
    "headroom.backtest.cli",
    "headroom.benchmarks.cli",
    "headroom.llmd.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="headroom", description=textwrap.fill(DESCRIPTION, 100),
                                     epilog=environment_help(ProcessSettings),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"headroom {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        importlib.import_module(module).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    configure()  # before any subcommand loads XGBoost
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except CommandError as err:
        print(f"headroom {args.command}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
