"""``headroom autoscale simulate`` and ``recommend``: the closed loop on a trace (Azure CSV or Mooncake JSONL).

- ``simulate --hpa FILE --trace TRACE``: replay an autoscaler (HPA or ScaledObject, any pipeline's metric
  names) with the simulated pool; a summary, and optionally a timeline CSV and a PNG;
- ``recommend --trace TRACE --slo-ttft-p99-ms X``: search the signals the model server really exports,
  targets, behaviors and tolerances for the cheapest autoscaler meeting the SLO, and write it for the
  chosen metric pipeline with what makes its metric exist (:mod:`autoscale.bundle`), a report, plots and
  the ``simulate`` command that reproduces its figures exactly.

A trace at its own speed may never load more than one server: ``--speedup`` replays it faster, and
``recommend`` says so (with a speed that would exercise scaling) instead of recommending from a tie.
The closed-loop modules import the pool simulator only when they run.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from headroom.autoscale.bundle import autoscaler_file, bundle
from headroom.autoscale.controller import ControllerSettings
from headroom.autoscale.documents import Autoscaler, load_autoscaler
from headroom.autoscale.errors import AutoscaleError
from headroom.autoscale.manifest import INITIAL_REPLICAS
from headroom.autoscale.pipelines import GMP_QUERY_URL, Pipeline, Workload
from headroom.autoscale.progress import StepProgress
from headroom.autoscale.servers import ModelServer
from headroom.cli.environment import reads
from headroom.contract.scaling_signals import Signal
from headroom.contract.server_metrics import KINDS, VLLM
from headroom.contract.settings import from_env
from headroom.errors import CommandError

if TYPE_CHECKING:
    from headroom.autoscale.closed_loop import LoopResult, LoopSettings
    from headroom.autoscale.recommend import Goal, Recommendation
    from headroom.sim.request import SimRequest

PIPELINES = tuple(p.value for p in Pipeline)
VLLM_API_PORT = 8000  # vLLM's default --port, where it serves the OpenAI API and /metrics
SPEEDUP_HELP = ("replay the trace this many times faster (arrival times divided by it); a trace at its own "
                "speed may never need a second server, so nothing scales")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    simulate = commands.add_parser("simulate", help="replay an HPA or ScaledObject on a trace with the simulated pool",
                                   **reads(ControllerSettings))
    simulate.add_argument("--hpa", required=True, type=Path, help="HPA or ScaledObject (YAML, as recommend writes it)")
    _loop_arguments(simulate)
    simulate.add_argument("--initial-replicas", type=int, default=None,
                          help="servers in service when the trace starts (default: the file's "
                               f"{INITIAL_REPLICAS} annotation, else minReplicas)")
    simulate.add_argument("--slo-ttft-ms", type=float, default=None,
                          help="report TTFT SLO attainment; also the router's SLO for the predicted-TTFT signal")
    simulate.add_argument("--timeline", type=Path, default=None, help="write the timeline CSV here")
    simulate.add_argument("--plot", type=Path, default=None, help="write a PNG of the timeline here")
    simulate.set_defaults(run=run_simulate)

    rec = commands.add_parser("recommend", help="search HPA settings on a trace for the cheapest that meets an SLO",
                              **reads(ControllerSettings))
    _loop_arguments(rec)
    rec.add_argument("--slo-ttft-p99-ms", required=True, type=float, help="TTFT p99 limit")
    rec.add_argument("--slo-tpot-p99-ms", type=float, default=None, help="TPOT p99 limit (optional)")
    rec.add_argument("--min-replicas", type=int, default=1)
    rec.add_argument("--max-replicas", type=int, default=10)
    rec.add_argument("--metrics-pipeline", choices=PIPELINES, default=Pipeline.GMP.value,
                     help="how the HPA gets its metric: GKE's managed Prometheus with the Stackdriver adapter "
                          "(gmp, default), prometheus-adapter, or a KEDA ScaledObject")
    rec.add_argument("--no-router-signals", action="store_true",
                     help="leave out headroom's own predicted-TTFT signal (the pool is not behind its router)")
    rec.add_argument("--kubernetes-version", default=None, metavar="X.Y",
                     help="the cluster's release; per-HPA tolerances are tried only where it honours them (1.35+)")
    rec.add_argument("--name", default="model-server", help="the Deployment (pods labelled app=NAME) and its HPA")
    rec.add_argument("--namespace", default="default")
    rec.add_argument("--metrics-port", default=None,
                     help="the model servers' metrics port (name or number); default the port their metrics are on: "
                          f"vLLM's API port, {VLLM_API_PORT} (it serves /metrics there), JetStream's port named "
                          "'metrics' (its --prometheus_port)")
    rec.add_argument("--router-name", default="headroom-router", help="app label of headroom's router pods")
    rec.add_argument("--prometheus-url", default=GMP_QUERY_URL, help="Prometheus query URL for KEDA")
    rec.add_argument("--out", type=Path, default=Path("autoscale-recommendation"),
                     help="directory for the manifests, report.md and plots")
    rec.set_defaults(run=run_recommend)


def _loop_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", required=True, type=Path, help="Azure CSV or Mooncake JSON-lines trace")
    parser.add_argument("--speedup", type=float, default=1.0, help=SPEEDUP_HELP)
    parser.add_argument("--limit", type=int, default=None, help="use at most the first N requests")
    parser.add_argument("--model-server", choices=KINDS, default=VLLM,
                        help="what the pool runs, which decides the metrics it exports (default vllm)")
    parser.add_argument("--vllm-version", default=ModelServer().version,
                        help=f"vLLM release (major.minor): 0.9 and older export {Signal.GPU_CACHE_USAGE.value}")
    parser.add_argument("--server-type", default="h100", help="simulated accelerator profile (default h100)")
    parser.add_argument("--load-delay-s", type=float, default=None, help="override the model load time")
    parser.add_argument("--scrape-interval-s", type=float, default=15.0, help="metric scrape interval")
    parser.add_argument("--adapter-lag-s", type=float, default=0.0, help="metrics adapter lag")
    parser.add_argument("--seed", type=int, default=0)


def load_autoscaler_file(path: Path) -> Autoscaler:
    """The autoscaler in ``path`` (see :mod:`autoscale.documents`), or a CommandError naming the file."""
    try:
        return load_autoscaler(path.read_text())
    except OSError as err:
        raise CommandError(f"cannot read {path}: {err.strerror or err}") from err
    except AutoscaleError as err:
        raise CommandError(f"{path}: {err}") from err


def loop_settings(args: argparse.Namespace, **extra: Any) -> LoopSettings:
    from headroom.autoscale.closed_loop import LoopSettings

    try:
        return LoopSettings(model_server=ModelServer(args.model_server, args.vllm_version),
                            server_type=args.server_type, load_delay_s=args.load_delay_s,
                            scrape_interval_s=args.scrape_interval_s, adapter_lag_s=args.adapter_lag_s,
                            seed=args.seed, controller=from_env(ControllerSettings), **extra)
    except (AutoscaleError, ValueError) as err:
        raise CommandError(str(err)) from err


def load_requests(args: argparse.Namespace, at_least: int = 1) -> list[SimRequest]:
    from headroom.sim.traces import TraceError, load_trace

    try:  # a file of either format, played without the synthetic prefixes the Azure trace lacks
        requests = load_trace(args.trace, speedup=args.speedup, limit=args.limit, seed=args.seed, prefixes=None)
    except TraceError as err:
        raise CommandError(f"cannot read trace: {err}") from err
    if len(requests) < at_least:
        raise CommandError(f"trace {args.trace} holds {len(requests)} requests; {at_least} or more are needed")
    return requests


def run_simulate(args: argparse.Namespace) -> int:
    from headroom.autoscale.closed_loop import run_closed_loop, starting_replicas
    from headroom.autoscale.report import plot_timeline, write_timeline_csv

    autoscaler = load_autoscaler_file(args.hpa)
    requests = load_requests(args)
    if args.initial_replicas is not None and args.initial_replicas < 1:
        raise CommandError(f"--initial-replicas must be >= 1, got {args.initial_replicas}")
    settings = loop_settings(args, initial_replicas=args.initial_replicas, ttft_slo_ms=args.slo_ttft_ms)
    console = Console(soft_wrap=True)
    try:
        with StepProgress(console, "simulating", "virtual s", every_s=5.0) as progress:
            result = run_closed_loop(autoscaler, requests, settings,
                                     progress=lambda now, end: progress.update(min(now, end), end))
    except AutoscaleError as err:
        raise CommandError(f"{args.hpa}: {err}") from err
    table = Table(title=f"{autoscaler.spec.name} on {args.trace.name} ×{args.speedup:g}, from "
                        f"{starting_replicas(autoscaler.spec, settings)} replicas")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for measure, value in summary_rows(result, args.slo_ttft_ms):
        table.add_row(measure, value)
    console.print(table)
    if args.timeline:
        write_timeline_csv(result, args.timeline)
        console.print(f"timeline: {args.timeline}")
    if args.plot:
        plot_timeline(result, args.plot, args.slo_ttft_ms, title=f"{autoscaler.spec.name} on {args.trace.name}")
        console.print(f"plot: {args.plot}")
    return 0


def summary_rows(result: LoopResult, slo_ttft_ms: float | None) -> list[tuple[str, str]]:
    """The figures ``simulate`` prints and ``recommend`` reports, formatted once."""
    rows = [("requests (dropped)", f"{result.requests} ({result.dropped})"),
            ("virtual duration", f"{result.end_s:.0f} s"),
            ("replica-hours", f"{result.replica_hours:.4f}"),
            ("peak desired replicas", str(result.peak_replicas)),
            ("rescales", str(result.rescales)),
            ("TTFT p50 / p99", f"{result.ttft_quantile(0.5):.0f} / {result.ttft_quantile(0.99):.0f} ms"),
            ("TPOT p99", f"{result.tpot_quantile(0.99):.1f} ms")]
    if slo_ttft_ms is not None:
        rows.append((f"TTFT ≤ {slo_ttft_ms:g} ms", f"{result.ttft_attainment(slo_ttft_ms):.2%}"))
    return rows


def run_recommend(args: argparse.Namespace) -> int:
    from headroom.autoscale.advice import scaling_advice
    from headroom.autoscale.recommend import Goal, Slo, recommend
    from headroom.autoscale.report import plot_cost_vs_slo, plot_timeline, recommendation_markdown

    if not 1 <= args.min_replicas <= args.max_replicas:
        raise CommandError(f"need 1 <= --min-replicas <= --max-replicas, got {args.min_replicas} and "
                           f"{args.max_replicas}")
    requests = load_requests(args, at_least=2)
    settings = loop_settings(args)
    pipeline = Pipeline(args.metrics_pipeline)
    metrics_port = args.metrics_port or (VLLM_API_PORT if args.model_server == "vllm" else "metrics")
    workload = Workload(args.name, args.namespace, _port(str(metrics_port)), args.router_name,
                        prometheus_url=args.prometheus_url, scrape_interval_s=round(args.scrape_interval_s))
    goal = Goal(Slo(args.slo_ttft_p99_ms, args.slo_tpot_p99_ms), args.min_replicas, args.max_replicas, pipeline,
                workload, not args.no_router_signals, args.kubernetes_version)
    console = Console(soft_wrap=True)
    try:
        with StepProgress(console, "closed-loop runs", "runs") as progress:
            result = recommend(requests, goal, settings, progress=progress.update)
    except AutoscaleError as err:
        raise CommandError(str(err)) from err
    args.out.mkdir(parents=True, exist_ok=True)
    if result.evaluations:  # at least as wide as the table needs (a log is 80 columns), nothing cut on a terminal
        Console(width=max(console.width, 140), soft_wrap=True).print(ranking_table(result, settings))
    command = reproduce_command(args, result.settings)
    advice = None if result.exercised else scaling_advice(requests, settings, args.speedup, args.max_replicas)
    why = not_met(result, goal) if result.best is None and advice is None else None
    said = tuple(notes(result, goal, workload)) if result.best is not None else ()
    (args.out / "report.md").write_text(recommendation_markdown(result, goal, args, command, advice, why, said))
    if result.evaluations:
        plot_cost_vs_slo(result.evaluations, args.out / "cost_vs_slo.png", goal.slo.ttft_p99_ms)
    if advice is not None:
        fixed = result.fixed
        carried = "" if fixed is None else (f"{fixed.replicas} fixed server(s) carry the whole trace within the SLO "
                                         f"(TTFT p99 {fixed.ttft_p99_ms:.0f} ms), so nothing needs to scale; ")
        console.print(f"[red]no recommendation[/red]: {carried}{advice.message}", soft_wrap=True)
        return 1
    if why is not None:
        console.print(f"[red]no configuration met the SLO[/red]: {why}; report in {args.out}", soft_wrap=True)
        return 1
    best = result.best
    assert best is not None
    for name, text in bundle(best.candidate.autoscaler, best.candidate.signal, pipeline, workload).items():
        (args.out / name).write_text(text)
    plot_timeline(best.result, args.out / "timeline.png", goal.slo.ttft_p99_ms, title="recommended autoscaler")
    for trap in result.traps:
        console.print(f"[yellow]note[/yellow] {trap.code}: {trap.message}", soft_wrap=True)
    for note in said:
        console.print(f"[yellow]note[/yellow] {note}", soft_wrap=True)
    console.print(f"recommended: {best.candidate.signal.value} target {best.candidate.target_text} "
                  f"({best.candidate.behavior}) from {result.warm_replicas} replicas: {best.replica_hours:.4f} "
                  f"replica-hours, TTFT p99 {best.ttft_p99_ms:.0f} ms, {best.attainment:.2%} within the SLO; wrote "
                  f"{args.out}", soft_wrap=True)
    console.print(f"reproduce: {command}", soft_wrap=True)
    return 0


def ranking_table(result: Recommendation, settings: LoopSettings) -> Table:
    """The best runs, passing first; the signal column is never cut (two vLLM queue series differ only at
    their end)."""
    table = Table(title=f"{len(result.evaluations)} configurations, {settings.model_server.label}, from "
                        f"{result.warm_replicas} replicas")
    widest = max(len(e.candidate.signal.value) for e in result.evaluations)
    table.add_column("signal", no_wrap=True, min_width=widest)
    for column in ("target", "behavior", "replica-h", "TTFT p99 ms", "TPOT p99 ms", "attainment", "SLO"):
        table.add_column(column, overflow="fold")  # a narrow terminal folds a value onto two lines, never cuts it
    for evaluation in result.ranked()[:12]:
        c = evaluation.candidate
        table.add_row(c.signal.value, c.target_text, c.behavior, f"{evaluation.replica_hours:.4f}",
                      f"{evaluation.ttft_p99_ms:.0f}", f"{evaluation.tpot_p99_ms:.1f}", f"{evaluation.attainment:.2%}",
                      "[green]met[/green]" if evaluation.meets else "[red]missed[/red]")
    return table


def notes(result: Recommendation, goal: Goal, workload: Workload) -> list[str]:
    """What the user must know about applying the recommendation: the floor it carries, what starting lower
    costs, and a placeholder left in what it wrote."""
    said = []
    cold = result.cold
    if cold is not None:
        warm = result.warm_replicas
        said.append(f"the figures start from {warm} serving replicas, the smallest pool that serves the trace's "
                    f"first two minutes within the SLO (the written file says so: {INITIAL_REPLICAS}); scale the "
                    f"Deployment to them before applying it (kubectl scale -n {workload.namespace} "
                    f"deployment/{workload.name} --replicas={warm}): applied to {goal.min_replicas} replica(s), the "
                    f"same autoscaler serves {cold.attainment:.2%} within the SLO (TTFT p99 {cold.ttft_p99_ms:.0f} ms)")
    if goal.pipeline is Pipeline.KEDA and "PROJECT_ID" in workload.prometheus_url:
        said.append(f"scaledobject.yaml asks {workload.prometheus_url}: replace PROJECT_ID with your Google Cloud "
                    f"project before applying it (or give --prometheus-url)")
    return said


def not_met(result: Recommendation, goal: Goal) -> str:
    """Why no autoscaler met the SLO, from the largest fixed pool allowed, and what to change."""
    ceiling = result.ceiling
    if ceiling is not None and not ceiling.meets:
        return (f"even {ceiling.replicas} fixed servers (--max-replicas) miss it (TTFT p99 {ceiling.ttft_p99_ms:.0f} "
                f"ms, {ceiling.attainment:.2%} within): raise --max-replicas, relax the SLO, or replay the trace "
                f"slower (--speedup)")
    closest = max(result.evaluations, key=lambda e: e.attainment)
    c = closest.candidate
    fixed = f" ({ceiling.replicas} fixed servers meet it: TTFT p99 {ceiling.ttft_p99_ms:.0f} ms)" if ceiling else ""
    return (f"the load outruns every autoscaler tried{fixed}; the closest, {c.signal.value} target {c.target_text} "
            f"({c.behavior}), served {closest.attainment:.2%} within (TTFT p99 {closest.ttft_p99_ms:.0f} ms): raise "
            f"--min-replicas above {result.warm_replicas}, or relax the SLO")


def reproduce_command(args: argparse.Namespace, settings: LoopSettings) -> str:
    """The ``simulate`` command that replays the written autoscaler with every setting the search used."""
    written = args.out / autoscaler_file(Pipeline(args.metrics_pipeline))
    parts = ["headroom", "autoscale", "simulate", "--hpa", str(written), "--trace", str(args.trace),
             "--speedup", f"{args.speedup:g}"]
    if args.limit is not None:
        parts += ["--limit", str(args.limit)]
    parts += ["--model-server", settings.model_server.kind]
    if settings.model_server.kind == "vllm":
        parts += ["--vllm-version", settings.model_server.version]
    parts += ["--server-type", settings.server_type]
    if settings.load_delay_s is not None:
        parts += ["--load-delay-s", f"{settings.load_delay_s:g}"]
    parts += ["--scrape-interval-s", f"{settings.scrape_interval_s:g}", "--adapter-lag-s",
              f"{settings.adapter_lag_s:g}", "--seed", str(settings.seed),
              "--slo-ttft-ms", f"{args.slo_ttft_p99_ms:g}"]  # from the replicas the written file says
    return shlex.join(parts)


def _port(text: str) -> int | str:
    return int(text) if text.isdigit() else text
