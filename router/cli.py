"""``headroom router ...``: serve the router, or measure its decision latency."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

from headroom.errors import CommandError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("router", help="Predicted-latency router for an LLM inference pool.")
    commands = parser.add_subparsers(dest="router_command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="Run the proxy, Pick API and ext_proc server.")
    serve.add_argument("--config", type=Path, required=True, help="Router config (YAML).")
    serve.set_defaults(run=run_serve)
    bench = commands.add_parser("bench", help="Measure scheduling decision latency with embedded prediction.")
    bench.add_argument("--candidates", type=int, default=100)
    bench.add_argument("--decisions", type=int, default=5000)
    bench.add_argument("--trees", type=int, default=200, help="Trees per model (the reference uses 200).")
    bench.add_argument("--depth", type=int, default=6)
    bench.add_argument("--slo", action="store_true", help="Requests carry SLO headers (streaming, TTFT+TPOT).")
    bench.set_defaults(run=run_bench)


def run_serve(args: argparse.Namespace) -> int:
    from headroom.contract.settings import from_env
    from headroom.contract.topics import KafkaSettings
    from headroom.router.config import load_config
    from headroom.router.errors import ConfigError
    from headroom.router.server import RouterServer
    try:
        config = load_config(args.config)
    except ConfigError as err:
        raise CommandError(str(err)) from err
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(RouterServer(config, from_env(KafkaSettings)).serve())
    return 0


def run_bench(args: argparse.Namespace) -> int:
    from headroom.router.bench import decision_latency, print_report
    if args.candidates < 1 or args.decisions < 1:
        raise CommandError("--candidates and --decisions must be positive")
    print_report(decision_latency(args.candidates, args.decisions, trees=args.trees, depth=args.depth, slo=args.slo))
    return 0
