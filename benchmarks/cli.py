"""``headroom bench router | proxy | ext-proc | predictor | sim``: the benchmarks behind ``docs/benchmarks.md``."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from headroom.cli.environment import reads
from headroom.contract.topics import KafkaSettings
from headroom.errors import CommandError
from headroom.sim.cli import pool_args, settings_of
from headroom.sim.settings import SimSettings

if TYPE_CHECKING:
    from headroom.sim.request import SimRequest


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("bench", help="measure the router, its proxy and ext_proc, the predictor and the simulator")
    commands = parser.add_subparsers(dest="bench_command", required=True, metavar="BENCH_COMMAND")

    router = commands.add_parser("router", help="Scheduling decision latency, with embedded prediction or without a predictor.")
    router.add_argument("--candidates", type=int, default=100)
    router.add_argument("--decisions", type=int, default=5000)
    router.add_argument("--trees", type=int, default=200, help="Trees per model (the reference uses 200).")
    router.add_argument("--depth", type=int, default=6)
    router.add_argument("--slo", action="store_true", help="Requests carry SLO headers (streaming, TTFT+TPOT).")
    router.add_argument("--predictor", choices=("embedded", "none"), default="embedded",
                        help="none: decide as a router without a predictor does (the heuristic profile).")
    router.set_defaults(run=_router)

    proxy = commands.add_parser("proxy", help="The router's HTTP proxy against the same simulated pool reached "
                                              "directly: throughput, added latency, router CPU per request and chunk.")
    _live_router_args(proxy, servers=4, seconds=5.0)
    proxy.add_argument("--concurrency", type=int, nargs="+", default=[32, 128], help="closed-loop clients per run")
    proxy.add_argument("--rounds", type=int, default=3, help="interleaved direct/proxied rounds")
    proxy.add_argument("--stream-tokens", type=int, default=64,
                       help="tokens of the streaming run at the first concurrency (0: no streaming run)")
    proxy.add_argument("--pin", action="store_true",
                       help="the router on a CPU of its own (the last this command may use), the pool and the load "
                            "on the others, in both arms (needs 2 CPUs or more)")
    proxy.set_defaults(run=_proxy)

    ext_proc = commands.add_parser("ext-proc", help="The router as Envoy's endpoint picker: scheduling decisions "
                                                    "per second of the router's CPU time.")
    _live_router_args(ext_proc, servers=16, seconds=10.0)
    ext_proc.add_argument("--streams", type=int, default=16, help="concurrent ext_proc streams")
    ext_proc.add_argument("--floor", nargs="*", metavar="VARIANT",
                          help="instead: an empty servicer served each way named (all when none is named; the first "
                               "one is also split into per-stream and per-message cost), CPU ms per exchange")
    ext_proc.add_argument("--rounds", type=int, default=3, help="--floor, --versus-epp: interleaved rounds")
    ext_proc.add_argument("--client", choices=("go", "python"), default="go",
                          help="--versus-epp: the compiled ext_proc client (benchmarks/ext_proc_load, built with the Go "
                               "toolchain the EPP needs too) or this process's")
    ext_proc.add_argument("--scrape-interval", type=float, default=0.05, metavar="SECONDS",
                          help="how often the router scrapes each server (a long one leaves the scraping's cost out)")
    ext_proc.add_argument("--in-process", type=int, metavar="EXCHANGES",
                          help="instead: the router's own work per exchange without gRPC, over this many exchanges")
    ext_proc.add_argument("--decision", choices=("compiled", "python"), default="compiled",
                          help="--in-process: each profile decided by its compiled twin, when it has one, or always by "
                               "the Python plugins")
    ext_proc.add_argument("--versus-epp", nargs="*", metavar="ARM",
                          help="instead: headroom against GIE's endpoint picker (infra/build-tool epp) on the same "
                               "servers, one process each, and client, in interleaved --rounds of --seconds; arms: "
                               "headroom-predicted, epp-default, headroom-heuristic, epp-matched (these four when none "
                               "is named), headroom-predicted-grpcio, headroom-heuristic-grpcio (the grpcio servicer)")
    ext_proc.add_argument("--front", choices=("native", "grpcio"), default="native",
                          help="what serves the router's ext_proc (--in-process: the event loop's side of it): the "
                               "compiled front or the grpcio servicer")
    ext_proc.set_defaults(run=_ext_proc)

    predictor = commands.add_parser("predictor", help="In-process and gRPC prediction latency and throughput.",
                                    **reads(KafkaSettings))
    predictor.add_argument("what", choices=("runtime", "grpc", "http", "update", "verify", "converge", "all"),
                           help="update: publish-to-serving delay through the broker of HEADROOM_KAFKA_BOOTSTRAP; "
                                "verify: what checking a model update's signature costs; "
                                "http: llm-d's /predict/bulk/strict next to the gRPC API, interleaved; "
                                "converge: the publish-to-serving delay of N prediction server processes (--instances)")
    predictor.add_argument("--instances", type=int, nargs="+", default=[1, 2, 3],
                           help="converge: prediction server processes, one run per count")
    predictor.add_argument("--versions", type=int, default=20, help="converge: versions published per run")
    predictor.add_argument("--candidates", type=int, nargs="+", help="candidate rows per call")
    predictor.add_argument("--iterations", type=int, default=2000, help="in-process calls per measurement")
    predictor.add_argument("--clients", type=int, default=4, help="concurrent closed-loop gRPC clients")
    predictor.add_argument("--seconds", type=float, default=10.0, help="duration of each gRPC or HTTP load run")
    predictor.add_argument("--workers", type=int, default=2, help="server threads serving gRPC calls")
    predictor.add_argument("--threads", type=int, default=1,
                           help="threads one large batch's tree evaluation is split over (HEADROOM_PREDICTOR_THREADS)")
    load = predictor.add_mutually_exclusive_group()
    load.add_argument("--coalesced", action="store_const", const="coalescing", dest="load_generator",
                      help="grpc: load through the coalescing PredictorClient instead of plain stub calls")
    load.add_argument("--go-load", action="store_const", const="go", dest="load_generator",
                      help="grpc: load from the compiled generator in benchmarks/grpc_load (needs the go toolchain; "
                           "costs the shared cores less CPU per call)")
    predictor.add_argument("--models", type=int, default=4, choices=(1, 2, 3, 4),
                           help="models per pool: TTFT mean, TPOT mean, TTFT p90, TPOT p90")
    predictor.add_argument("--tls", action="store_true",
                           help="grpc: a TLS server beside the plaintext one, the two loaded in turn (see --rounds)")
    predictor.add_argument("--rounds", type=int, help="grpc: runs of each transport and candidate count (default 1); "
                                                      "http: interleaved rounds of each API (default 3)")
    predictor.add_argument("--rpc", choices=("predict", "health"), default="predict",
                           help="grpc: the call to load (health: the transport alone; needs --go-load)")
    predictor.add_argument("--reference", type=Path, metavar="PYTHON",
                           help="http: llm-d's own prediction server too, in the same rounds, run with this Python "
                                "(with the requirements.txt of the module's latencypredictor/: "
                                "fastapi, uvicorn, scikit-learn, pandas, xgboost, lightgbm, ...)")
    predictor.set_defaults(run=_predictor)

    pod_type = commands.add_parser("pod-type", help="Two server roles: a pool key per role, or the role as a feature.")
    pod_type.add_argument("--trace", choices=("azure", "mooncake"), default="azure")
    pod_type.add_argument("--requests", type=int, default=20_000)
    pod_type.add_argument("--servers-per-role", type=int, default=2)
    pod_type.add_argument("--load", type=float, default=0.7, help="offered load as a fraction of pool capacity")
    pod_type.add_argument("--train-rows", type=int, nargs="+", default=[1000, 4000, 100_000],
                          help="newest training rows per size (all roles together)")
    pod_type.add_argument("--seed", type=int, default=0)
    pod_type.set_defaults(run=_pod_type)

    sim = commands.add_parser("sim", help="Simulation speed and the baseline-policy table on the traces.",
                              **reads(SimSettings))
    pool_args(sim)
    sim.add_argument("--traces", default="azure,mooncake",
                     help="Comma-separated traces: files, shared traces (azure, mooncake) or synthetic loads.")
    sim.add_argument("--policies", default="round-robin,random,least-queue,prefix-least-queue,least-kv,composite")
    sim.set_defaults(run=_sim)


def _live_router_args(parser: argparse.ArgumentParser, servers: int, seconds: float) -> None:
    """What the benchmarks of a live router process share."""
    parser.add_argument("--servers", type=int, default=servers, help="simulated servers (candidates per decision)")
    parser.add_argument("--seconds", type=float, default=seconds, help="measured seconds per run")
    parser.add_argument("--predictor", choices=("none", "embedded"), default="embedded",
                        help="embedded: every decision predicted by in-process models of the reference's size")
    parser.add_argument("--profile", type=Path, help="write the router's cProfile statistics here")


def _router(args: argparse.Namespace) -> int:
    from headroom.benchmarks.router import decision_latency, print_report

    if args.candidates < 1 or args.decisions < 1:
        raise CommandError("--candidates and --decisions must be positive")
    print_report(decision_latency(args.candidates, args.decisions, trees=args.trees, depth=args.depth, slo=args.slo,
                                  embedded=args.predictor == "embedded"))
    return 0


def _proxy(args: argparse.Namespace) -> int:
    from headroom.benchmarks.live import load_average, split_cpus
    from headroom.benchmarks.proxy import bench_proxy, print_report

    if args.servers < 1 or args.rounds < 1 or min(args.concurrency) < 1 or args.seconds <= 0:
        raise CommandError("--servers, --rounds, --concurrency and --seconds must be positive")
    if args.stream_tokens < 0:
        raise CommandError("--stream-tokens must not be negative")
    if args.pin:
        try:
            split_cpus()
        except ValueError as err:
            raise CommandError(f"--pin: {err}") from err
    started = load_average()
    runs = bench_proxy(args.servers, args.concurrency, args.seconds, args.rounds, predictor=args.predictor,
                       stream_tokens=args.stream_tokens, profile=args.profile, pin=args.pin)
    for run in runs:
        print(json.dumps(asdict(run)))
    print_report(runs, started, args.pin)
    return 0


def _ext_proc(args: argparse.Namespace) -> int:
    from headroom.benchmarks.ext_proc import bench_ext_proc

    if args.servers < 1 or args.streams < 1 or args.seconds <= 0 or args.rounds < 1:
        raise CommandError("--servers, --streams, --seconds and --rounds must be positive")
    if args.in_process is not None:
        from headroom.benchmarks.ext_proc_in_process import bench_in_process
        if args.in_process < 1:
            raise CommandError("--in-process must be positive (exchanges to run)")
        print(json.dumps(bench_in_process(args.servers, args.in_process, args.predictor, args.front,
                                          args.decision)))
        return 0
    if args.versus_epp is not None:
        from headroom.benchmarks.ext_proc_versus import ARMS, GRPCIO_ARMS, bench_versus_epp, print_report, ratios
        known = (*ARMS, *GRPCIO_ARMS)
        unknown = sorted(set(args.versus_epp) - set(known))
        if unknown:
            raise CommandError(f"unknown --versus-epp arms {unknown}; known: {', '.join(known)}")
        runs = bench_versus_epp(args.servers, args.streams, args.seconds, args.rounds,
                                [arm for arm in known if arm in args.versus_epp] if args.versus_epp else ARMS,
                                args.client)
        for run in runs:
            print(json.dumps({**asdict(run), "decisions_per_cpu_s": round(run.decisions_per_cpu_s, 1)}))
        for row in ratios(runs):
            print(json.dumps(row))
        print_report(runs)
        return 0
    if args.floor is not None:
        from headroom.benchmarks.ext_proc_floor import VARIANTS, bench_floor
        unknown = sorted(set(args.floor) - set(VARIANTS))
        if unknown:
            raise CommandError(f"unknown --floor variants {unknown}; known: {', '.join(VARIANTS)}")
        print(json.dumps(bench_floor(args.floor or list(VARIANTS), args.rounds, args.seconds, args.streams)))
        return 0
    if not args.scrape_interval > 0:
        raise CommandError("--scrape-interval must be positive")
    print(json.dumps(bench_ext_proc(args.servers, args.streams, args.seconds, args.predictor, args.profile,
                                    args.scrape_interval, args.front)))
    return 0


def _predictor(args: argparse.Namespace) -> int:
    from headroom.benchmarks import predictor, predictor_grpc, predictor_http
    from headroom.contract.settings import from_env
    from headroom.contract.topics import KafkaSettings

    if args.what in ("runtime", "all"):
        for row in predictor.bench_runtime(tuple(args.candidates or (1, 10, 100, 1000)), args.iterations,
                                           args.models, args.threads):
            print(json.dumps(row))
    if args.what in ("grpc", "all"):
        for row in predictor_grpc.bench_grpc(tuple(args.candidates or (100, 1000)), args.clients, args.seconds,
                                             args.workers, args.models, args.load_generator or "python",
                                             args.threads, ("plaintext", "tls") if args.tls else ("plaintext",),
                                             args.rounds or 1, args.rpc):
            print(json.dumps(row))
    if args.what in ("http", "all"):
        results = predictor_http.bench_http(args.candidates[0] if args.candidates else 100, args.clients,
                                            args.seconds, args.rounds or 3, args.workers, reference=args.reference)
        for row in results + predictor_http.summary(results):
            print(json.dumps(row))
    if args.what in ("update", "all"):
        print(json.dumps(predictor.bench_update(from_env(KafkaSettings))))
    if args.what in ("verify", "all"):
        for row in predictor.bench_verify(args.iterations, args.models):
            print(json.dumps(row))
    if args.what in ("converge", "all"):
        from headroom.benchmarks.predictor_convergence import bench_convergence
        for instances in args.instances:
            print(json.dumps(bench_convergence(from_env(KafkaSettings), instances, args.versions)))
    return 0


def _pod_type(args: argparse.Namespace) -> int:
    from headroom.benchmarks.pod_type import compare, simulate

    records = simulate(args.trace, args.requests, args.servers_per_role, args.load, args.seed)
    for row in compare(records, tuple(args.train_rows)):
        print(json.dumps(row))
    return 0


def _sim(args: argparse.Namespace) -> int:
    from headroom.benchmarks.sim import bench_policies
    from headroom.sim.report import print_policy_table
    from headroom.sim.traces import load_trace

    settings = settings_of(args)
    traces = [t.strip() for t in args.traces.split(",") if t.strip()]
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    rows = []
    try:
        for trace in traces:
            def load(rate: float | None, trace: str = trace) -> list[SimRequest]:
                return load_trace(trace, rate=rate, seed=settings.seed, limit=args.limit)

            rows += bench_policies(trace, load, servers=settings.servers, utilization=settings.utilization,
                                   policies=policies, seed=settings.seed, server_type=settings.server_type)
    except ValueError as err:
        raise CommandError(str(err)) from err
    print_policy_table(rows, settings)
    return 0
