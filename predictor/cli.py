"""``headroom predictor serve | bench``."""

from __future__ import annotations

import argparse
import json
import logging

from headroom.contract.settings import SettingsError, describe, from_env
from headroom.contract.topics import KafkaSettings
from headroom.predictor.settings import PredictorSettings


def register(subparsers) -> None:
    group = subparsers.add_parser("predictor", help="prediction servers over gRPC")
    commands = group.add_subparsers(dest="predictor_command", required=True, metavar="COMMAND")
    settings_help = "\n".join(f"  {env}: {doc} (default {default!r})"
                              for _, env, default, doc in describe(PredictorSettings) + describe(KafkaSettings))
    serve = commands.add_parser("serve", help="run one prediction server until SIGTERM",
                                epilog="settings (environment):\n" + settings_help,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    serve.add_argument("--port", type=int, help="gRPC port (overrides HEADROOM_PREDICTOR_PORT)")
    serve.add_argument("--metrics-port", type=int, help="metrics port (overrides HEADROOM_PREDICTOR_METRICS_PORT)")
    serve.add_argument("--bootstrap", help="Kafka bootstrap servers (overrides HEADROOM_KAFKA_BOOTSTRAP)")
    serve.set_defaults(run=run_serve)
    bench = commands.add_parser("bench", help="measure in-process and gRPC prediction latency and throughput")
    bench.add_argument("what", choices=("runtime", "grpc", "update", "all"),
                       help="update: publish-to-serving delay through the broker of HEADROOM_KAFKA_BOOTSTRAP")
    bench.add_argument("--candidates", type=int, nargs="+", help="candidate rows per call")
    bench.add_argument("--iterations", type=int, default=2000, help="in-process calls per measurement")
    bench.add_argument("--clients", type=int, default=4, help="concurrent closed-loop gRPC clients")
    bench.add_argument("--seconds", type=float, default=10.0, help="duration of each gRPC load run")
    bench.add_argument("--workers", type=int, default=2, help="server threads serving gRPC calls")
    bench.add_argument("--threads", type=int, default=1,
                       help="threads one large batch's tree evaluation is split over (HEADROOM_PREDICTOR_THREADS)")
    load = bench.add_mutually_exclusive_group()
    load.add_argument("--coalesced", action="store_const", const="coalescing", dest="load_generator",
                      help="grpc: load through the coalescing PredictorClient instead of plain stub calls")
    load.add_argument("--go-load", action="store_const", const="go", dest="load_generator",
                      help="grpc: load from the compiled generator in benchmarks/grpc_load (needs the go toolchain; "
                           "costs the shared cores less CPU per call)")
    bench.add_argument("--models", type=int, default=4, choices=(1, 2, 3, 4),
                       help="models per pool: TTFT mean, TPOT mean, TTFT p90, TPOT p90")
    bench.set_defaults(run=run_bench)


def run_serve(args) -> int:
    from headroom.errors import CommandError
    from headroom.predictor.server import serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = {k: v for k, v in (("port", args.port), ("metrics_port", args.metrics_port)) if v is not None}
    try:
        settings = from_env(PredictorSettings, **overrides)
        kafka = from_env(KafkaSettings, **({"bootstrap_servers": args.bootstrap} if args.bootstrap else {}))
    except SettingsError as err:
        raise CommandError(str(err)) from err
    try:
        return serve(settings, kafka)
    except (OSError, ValueError) as err:
        raise CommandError(f"cannot start the predictor: {err}") from err


def run_bench(args) -> int:
    from headroom.predictor import bench

    if args.what in ("runtime", "all"):
        for row in bench.bench_runtime(tuple(args.candidates or (1, 10, 100, 1000)), args.iterations, args.models,
                                       args.threads):
            print(json.dumps(row))
    if args.what in ("grpc", "all"):
        for row in bench.bench_grpc(tuple(args.candidates or (100, 1000)), args.clients, args.seconds,
                                    args.workers, args.models, args.load_generator or "python", args.threads):
            print(json.dumps(row))
    if args.what in ("update", "all"):
        print(json.dumps(bench.bench_update(from_env(KafkaSettings))))
    return 0
