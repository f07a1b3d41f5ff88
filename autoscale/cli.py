"""``headroom autoscale`` — check an HPA manifest, replay one HPA decision, simulate and recommend HPAs.

- ``check --hpa FILE``: parse (with Kubernetes' defaults), validate against the autoscaling/v2 schema
  when ``kubernetes-validate`` is installed, and list known traps;
- ``decide --hpa FILE --replicas N --metric NAME=V1,V2,...``: one reconcile from per-pod values
  (Pods metrics) or single values (Object/External), printing every metric's proposal;
- ``simulate --hpa FILE --trace CSV``: the closed loop on an Azure-format trace, with a summary, and
  optionally a timeline CSV and a PNG;
- ``recommend --trace CSV --slo-ttft-p99-ms X``: search signals, targets, behaviors and tolerances for
  the cheapest HPA meeting the SLO; writes ``hpa.yaml``, ``report.md`` and plots.

The closed-loop commands import the pool simulator only when they run.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from headroom.autoscale.controller import ControllerSettings, HpaController, ScaleTarget
from headroom.autoscale.errors import AutoscaleError
from headroom.autoscale.manifest import emit_manifest, parse_manifest, spec_to_dict
from headroom.autoscale.metrics_source import StaticMetrics
from headroom.autoscale.pods import Pod, PodSample
from headroom.autoscale.quantity import to_milli
from headroom.autoscale.spec import HpaSpec, ScaleTargetRef, SourceType
from headroom.autoscale.traps import find_traps
from headroom.contract.settings import from_env
from headroom.errors import CommandError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("autoscale", help="HPA simulation and autoscaling guidance for LLM pools")
    commands = parser.add_subparsers(dest="autoscale_command", required=True, metavar="COMMAND")

    check = commands.add_parser("check", help="parse and validate an autoscaling/v2 HPA manifest, list traps")
    check.add_argument("--hpa", required=True, type=Path, help="HPA manifest (YAML)")
    check.add_argument("--load-delay-s", type=float, default=None, help="model load time, for the slow-load trap")
    check.set_defaults(run=run_check)

    decide = commands.add_parser("decide", help="one HPA reconcile from given metric values")
    decide.add_argument("--hpa", required=True, type=Path, help="HPA manifest (YAML)")
    decide.add_argument("--replicas", required=True, type=int, help="current replica count")
    decide.add_argument("--metric", action="append", default=[], metavar="NAME=V1,V2,...",
                        help="metric values as quantities: one per pod for Pods/Resource, one for Object, "
                             "one per series for External (repeatable)")
    decide.set_defaults(run=run_decide)

    simulate = commands.add_parser("simulate", help="replay an HPA on a trace with the simulated pool")
    simulate.add_argument("--hpa", required=True, type=Path, help="HPA manifest (YAML)")
    simulate.add_argument("--trace", required=True, type=Path, help="Azure-format CSV trace")
    simulate.add_argument("--speedup", type=float, default=1.0, help="replay the trace this many times faster")
    simulate.add_argument("--limit", type=int, default=None, help="use at most this many requests")
    simulate.add_argument("--server-type", default="h100", help="simulated server profile (default h100)")
    simulate.add_argument("--load-delay-s", type=float, default=None, help="override the model load time")
    simulate.add_argument("--scrape-interval-s", type=float, default=15.0, help="metric scrape interval")
    simulate.add_argument("--adapter-lag-s", type=float, default=0.0, help="metrics adapter lag")
    simulate.add_argument("--slo-ttft-ms", type=float, default=None, help="report TTFT SLO attainment")
    simulate.add_argument("--seed", type=int, default=0)
    simulate.add_argument("--timeline", type=Path, default=None, help="write the timeline CSV here")
    simulate.add_argument("--plot", type=Path, default=None, help="write a PNG of the timeline here")
    simulate.set_defaults(run=run_simulate)

    rec = commands.add_parser("recommend", help="search HPA settings on a trace for the cheapest that meets an SLO")
    rec.add_argument("--trace", required=True, type=Path, help="Azure-format CSV trace")
    rec.add_argument("--slo-ttft-p99-ms", required=True, type=float, help="TTFT p99 limit")
    rec.add_argument("--slo-tpot-p99-ms", type=float, default=None, help="TPOT p99 limit (optional)")
    rec.add_argument("--min-replicas", type=int, default=1)
    rec.add_argument("--max-replicas", type=int, default=10)
    rec.add_argument("--speedup", type=float, default=1.0, help="replay the trace this many times faster")
    rec.add_argument("--limit", type=int, default=None, help="use at most this many requests")
    rec.add_argument("--server-type", default="h100", help="simulated server profile (default h100)")
    rec.add_argument("--load-delay-s", type=float, default=None, help="override the model load time")
    rec.add_argument("--name", default="model-server", help="name of the HPA and its Deployment")
    rec.add_argument("--seed", type=int, default=0)
    rec.add_argument("--out", type=Path, default=Path("autoscale-recommendation"),
                     help="directory for hpa.yaml, report.md and plots")
    rec.set_defaults(run=run_recommend)


def load_spec(path: Path) -> HpaSpec:
    try:
        return parse_manifest(path.read_text())
    except OSError as err:
        raise CommandError(f"cannot read {path}: {err}") from err
    except AutoscaleError as err:
        raise CommandError(f"{path}: {err}") from err


def run_check(args: argparse.Namespace) -> int:
    console = Console()
    spec = load_spec(args.hpa)
    try:
        import kubernetes_validate
    except ImportError:
        console.print("schema: skipped (install kubernetes-validate to check against the autoscaling/v2 schema)")
    else:
        try:
            kubernetes_validate.validate(spec_to_dict(spec), kubernetes_validate.latest_version(), strict=True)
        except kubernetes_validate.ValidationError as err:
            raise CommandError(f"{args.hpa}: fails the autoscaling/v2 schema: {err.message}") from err
        console.print("schema: valid autoscaling/v2 HorizontalPodAutoscaler")
    console.print(f"{spec.namespace}/{spec.name} → {spec.target_ref.kind}/{spec.target_ref.name}, "
                  f"replicas {spec.min_replicas}..{spec.max_replicas}, "
                  f"{'behavior' if spec.behavior else 'legacy (no behavior)'}")
    for metric in spec.metrics:
        console.print(f"  {metric.label}: {metric.target.type.value} {_amount(metric)}")
    traps = find_traps(spec, from_env(ControllerSettings).tolerance, args.load_delay_s)
    for trap in traps:
        console.print(f"[yellow]warning[/yellow] {trap.code}: {trap.message}")
    return 0


def run_decide(args: argparse.Namespace) -> int:
    spec = load_spec(args.hpa)
    if args.replicas < 0:
        raise CommandError(f"--replicas must be >= 0, got {args.replicas}")
    values = dict(_metric_arg(text) for text in args.metric)
    pods, objects, external = {}, {}, {}
    for metric in spec.metrics:
        if metric.name not in values:
            continue
        given = values[metric.name]
        if metric.source is SourceType.OBJECT:
            objects[metric.label] = given[0]
        elif metric.source is SourceType.EXTERNAL:
            external[metric.label] = given
        else:
            pods[metric.label] = {f"pod-{i}": PodSample(v) for i, v in enumerate(given)}
    unknown = set(values) - {m.name for m in spec.metrics}
    if unknown:
        raise CommandError(f"--metric {', '.join(sorted(unknown))}: not a metric of {args.hpa}")
    settings = from_env(ControllerSettings)
    target = ScaleTarget(args.replicas, tuple(Pod(f"pod-{i}") for i in range(args.replicas)))
    # CPU samples only count after the CPU initialization period, so decide "later".
    now = settings.cpu_initialization_period + settings.sync_period
    result = HpaController(spec, settings).sync(now, target, StaticMetrics(pods, objects, external))
    table = Table(title=f"{spec.name}: {result.current} → {result.desired} ({result.reason})")
    for column in ("metric", "target", "current", "proposal"):
        table.add_column(column)
    for outcome in result.outcomes:
        metric = outcome.metric
        if outcome.proposal is None:
            table.add_row(metric.label, _amount(metric), "-", f"[red]{outcome.error}[/red]")
        else:
            current = outcome.proposal.current
            shown = f"{current}%" if metric.target.type.value == "Utilization" else f"{current / 1000:g}"
            table.add_row(metric.label, _amount(metric), shown, str(outcome.proposal.replicas))
    Console().print(table)
    return 0


def run_simulate(args: argparse.Namespace) -> int:
    from headroom.autoscale.closed_loop import LoopSettings, run_closed_loop
    from headroom.autoscale.report import plot_timeline, write_timeline_csv
    from headroom.sim.traces import TraceError, load_azure

    spec = load_spec(args.hpa)
    try:
        requests = load_azure(args.trace, speedup=args.speedup, limit=args.limit, prefixes=None)
    except (OSError, TraceError) as err:
        raise CommandError(f"cannot read trace {args.trace}: {err}") from err
    if not requests:
        raise CommandError(f"trace {args.trace} holds no requests")
    settings = LoopSettings(server_type=args.server_type, load_delay_s=args.load_delay_s,
                            scrape_interval_s=args.scrape_interval_s, adapter_lag_s=args.adapter_lag_s,
                            seed=args.seed, controller=from_env(ControllerSettings))
    console = Console()
    try:
        with console.status(f"simulating {len(requests)} requests"):
            result = run_closed_loop(spec, requests, settings)
    except (AutoscaleError, ValueError) as err:
        raise CommandError(str(err)) from err
    table = Table(title=f"{spec.name} on {args.trace.name} ×{args.speedup:g}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("requests (dropped)", f"{result.requests} ({result.dropped})")
    table.add_row("virtual duration", f"{result.end_s:.0f} s")
    table.add_row("replica-hours", f"{result.replica_seconds / 3600:.3f}")
    table.add_row("max desired replicas", str(max(p.spec_replicas for p in result.timeline)))
    table.add_row("rescales", str(result.rescales))
    table.add_row("TTFT p50 / p99", f"{result.ttft_quantile(0.5):.0f} / {result.ttft_quantile(0.99):.0f} ms")
    table.add_row("TPOT p99", f"{result.tpot_quantile(0.99):.1f} ms")
    if args.slo_ttft_ms is not None:
        table.add_row(f"TTFT ≤ {args.slo_ttft_ms:g} ms", f"{result.ttft_attainment(args.slo_ttft_ms):.2%}")
    console.print(table)
    if args.timeline:
        write_timeline_csv(result, args.timeline)
        console.print(f"timeline: {args.timeline}")
    if args.plot:
        plot_timeline(result, args.plot, args.slo_ttft_ms, title=f"{spec.name} on {args.trace.name}")
        console.print(f"plot: {args.plot}")
    return 0


def run_recommend(args: argparse.Namespace) -> int:
    from headroom.autoscale.closed_loop import LoopSettings
    from headroom.autoscale.recommend import Slo, recommend
    from headroom.autoscale.report import plot_cost_vs_slo, plot_timeline
    from headroom.sim.traces import TraceError, load_azure

    if not 1 <= args.min_replicas <= args.max_replicas:
        raise CommandError(f"need 1 <= --min-replicas <= --max-replicas, got {args.min_replicas} and "
                           f"{args.max_replicas}")
    try:
        requests = load_azure(args.trace, speedup=args.speedup, limit=args.limit, prefixes=None)
    except (OSError, TraceError) as err:
        raise CommandError(f"cannot read trace {args.trace}: {err}") from err
    if len(requests) < 2:
        raise CommandError(f"trace {args.trace} holds too few requests")
    settings = LoopSettings(server_type=args.server_type, load_delay_s=args.load_delay_s, seed=args.seed,
                            controller=from_env(ControllerSettings))
    slo = Slo(args.slo_ttft_p99_ms, args.slo_tpot_p99_ms)
    console = Console()
    started = time.perf_counter()
    with console.status("searching") as status:
        result = recommend(requests, slo, args.min_replicas, args.max_replicas, settings,
                           progress=lambda text: status.update(f"simulating {text}"))
    elapsed = time.perf_counter() - started
    args.out.mkdir(parents=True, exist_ok=True)
    table = Table(title=f"{len(result.evaluations)} configurations, warm start {result.warm_replicas} replicas, "
                        f"{elapsed:.0f} s")
    for column in ("signal", "target", "behavior", "replica-h", "TTFT p99 ms", "TPOT p99 ms", "attainment", "SLO"):
        table.add_column(column)
    for evaluation in result.ranked()[:12]:
        c = evaluation.candidate
        table.add_row(c.signal.value, f"{c.target:g}", c.behavior, f"{evaluation.replica_hours:.3f}",
                      f"{evaluation.ttft_p99_ms:.0f}", f"{evaluation.tpot_p99_ms:.1f}", f"{evaluation.attainment:.2%}",
                      "[green]met[/green]" if evaluation.meets else "[red]missed[/red]")
    console.print(table)
    (args.out / "report.md").write_text(recommendation_markdown(result, slo, args))
    plot_cost_vs_slo(result.evaluations, args.out / "cost_vs_slo.png", slo.ttft_p99_ms)
    if result.best is None:
        console.print(f"[red]no configuration met the SLO[/red]; report in {args.out}")
        return 1
    spec = replace(result.best.candidate.spec, name=args.name, target_ref=ScaleTargetRef(name=args.name))
    (args.out / "hpa.yaml").write_text(emit_manifest(spec))
    plot_timeline(result.best.result, args.out / "timeline.png", slo.ttft_p99_ms, title="recommended HPA")
    for trap in result.traps:
        console.print(f"[yellow]warning[/yellow] {trap.code}: {trap.message}")
    console.print(f"recommended: {result.best.candidate.signal.value} target {result.best.candidate.target:g} "
                  f"({result.best.candidate.behavior}); wrote {args.out}/hpa.yaml, report.md and plots")
    return 0


def recommendation_markdown(result, slo, args: argparse.Namespace) -> str:
    """The search's full table as Markdown (``result``: a Recommendation, ``slo``: its Slo)."""
    lines = [f"# HPA recommendation for {args.trace.name} (×{args.speedup:g})", "",
             f"SLO: TTFT p99 ≤ {slo.ttft_p99_ms:g} ms" + (f", TPOT p99 ≤ {slo.tpot_p99_ms:g} ms"
                                                       if slo.tpot_p99_ms else ""),
             f"Replicas {args.min_replicas}..{args.max_replicas}, server {args.server_type}, warm start "
             f"{result.warm_replicas}.", "",
             "| signal | target | behavior | replica-h | TTFT p99 ms | TPOT p99 ms | attainment | SLO |",
             "|---|---|---|---|---|---|---|---|"]
    for e in result.ranked():
        c = e.candidate
        lines.append(f"| {c.signal.value} | {c.target:g} | {c.behavior} | {e.replica_hours:.3f} | "
                     f"{e.ttft_p99_ms:.0f} | {e.tpot_p99_ms:.1f} | {e.attainment:.2%} | "
                     f"{'met' if e.meets else 'missed'} |")
    if result.traps:
        lines += ["", "## Warnings", ""] + [f"- `{t.code}`: {t.message}" for t in result.traps]
    return "\n".join(lines) + "\n"


def _metric_arg(text: str) -> tuple[str, list[int]]:
    name, sep, values = text.rpartition("=")
    if not sep or not name or not values:
        raise CommandError(f"--metric {text!r}: expected NAME=V1,V2,...")
    try:
        return name, [to_milli(v) for v in values.split(",")]
    except AutoscaleError as err:
        raise CommandError(f"--metric {text!r}: {err}") from err


def _amount(metric) -> str:
    amount = metric.target.amount
    return f"{amount}%" if metric.target.type.value == "Utilization" else f"{amount / 1000:g}"
