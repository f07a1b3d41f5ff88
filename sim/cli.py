"""``headroom sim ...``: the simulator's commands.

- ``run`` — one trace (a file in a known format, a shared trace or a synthetic load) through one policy;
  prints a summary, optionally writes telemetry as JSON lines.
- ``serve`` — a pool of live simulated servers on consecutive loopback ports until interrupted.

Simulation speed and the baseline-policy table are ``headroom bench sim``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from pathlib import Path

from headroom.cli.environment import reads
from headroom.contract.telemetry import encode
from headroom.errors import CommandError
from headroom.sim.settings import SimSettings, settings_from
from headroom.sim.traces import FORMATS


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("sim", help="a calibrated simulator of an LLM model-server pool")
    commands = parser.add_subparsers(dest="sim_command", required=True, metavar="SIM_COMMAND")

    one = commands.add_parser("run", help="Run one trace through one policy.", **reads(SimSettings))
    pool_args(one)
    one.add_argument("--trace", default="azure",
                     help="A trace file, a shared trace (azure, mooncake) or a synthetic load (e.g. code:burst_factor=8).")
    one.add_argument("--format", choices=FORMATS, help="The trace's format (default: from --trace).")
    one.add_argument("--policy", default="least-queue")
    one.add_argument("--telemetry", type=Path, help="Write one telemetry record per line here.")
    one.set_defaults(run=_run)

    serve = commands.add_parser("serve", help="Serve live simulated servers over HTTP on loopback.", **reads(SimSettings))
    serve.add_argument("--servers", type=int, help="How many servers (consecutive ports).")
    serve.add_argument("--server-type", help="Profile name, e.g. h100 or a100.")
    serve.add_argument("--base-port", type=int, help="Port of the first server (0: any free ports).")
    serve.add_argument("--time-scale", type=float, help="Virtual seconds per wall-clock second.")
    serve.add_argument("--seed", type=int)
    serve.set_defaults(run=_serve)


def pool_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--servers", type=int, help="Servers in the pool.")
    parser.add_argument("--server-type", help="Profile name, e.g. h100 or a100.")
    parser.add_argument("--utilization", type=float, help="Offered load as a fraction of pool capacity.")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--limit", type=int, help="Use only the first N requests of each trace.")


def settings_of(args: argparse.Namespace) -> SimSettings:
    try:
        return settings_from(args)
    except ValueError as err:
        raise CommandError(str(err)) from err


def _run(args: argparse.Namespace) -> int:
    from headroom.sim.capacity import capacity_rps
    from headroom.sim.policies import policy
    from headroom.sim.pool import run, uniform_pool
    from headroom.sim.report import print_policy_table, summarize
    from headroom.sim.traces import load_trace

    settings = settings_of(args)
    try:
        pick = policy(args.policy, settings.seed)
        native = load_trace(args.trace, args.format, seed=settings.seed, limit=args.limit)
        rate = settings.utilization * settings.servers * capacity_rps(native, settings.server_type)
        requests = load_trace(args.trace, args.format, rate=rate, seed=settings.seed, limit=args.limit)
    except ValueError as err:
        raise CommandError(str(err)) from err
    cpu = time.process_time()
    result = run(requests, uniform_pool(settings.servers, settings.server_type), pick, seed=settings.seed,
                 scrape_interval_s=settings.scrape_interval_s)
    print_policy_table([summarize(args.trace, args.policy, requests, result, time.process_time() - cpu)], settings)
    if args.telemetry:
        with args.telemetry.open("wb") as out:
            for record in result.records:
                out.write(encode(record) + b"\n")
        print(f"wrote {len(result.records)} telemetry records to {args.telemetry}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from headroom.sim.live import serve_pool
    from headroom.sim.profile import profile

    settings = settings_of(args)
    try:
        prof = profile(settings.server_type)
    except ValueError as err:
        raise CommandError(str(err)) from err

    async def main() -> None:
        servers = await serve_pool([prof] * settings.servers, host=settings.host, base_port=settings.base_port,
                                   time_scale=settings.time_scale, seed=settings.seed)
        for server in servers:
            print(f"{server.server_id} ({prof.name}) at {server.url}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            for server in servers:
                await server.stop()
            print("stopped", flush=True)

    try:
        asyncio.run(main())
    except OSError as err:
        raise CommandError(f"cannot listen on {settings.host}:{settings.base_port}: {err}") from err
    return 0
