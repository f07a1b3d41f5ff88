"""``headroom autoscale`` — check an autoscaler, replay one HPA decision, simulate and recommend HPAs.

- ``check --hpa FILE [--kubernetes-version X.Y]``: parse (with Kubernetes' defaults), validate against
  that release's autoscaling/v2 schema, and list known traps, the release's rejected or ignored fields
  among them;
- ``decide --hpa FILE --replicas N --metric NAME=V1,V2,...``: one reconcile from per-pod values (Pods and
  Resource metrics) or single values (Object/External), with the pods' requests, readiness and Pending
  state (``--pods`` from ``kubectl get pods -o yaml``, or ``--requests``/``--not-ready``/``--pending``);
- ``simulate`` and ``recommend`` (:mod:`autoscale.cli_runs`): the closed loop on a trace.

``FILE`` is an HPA, or a KEDA ScaledObject (read as the HPA KEDA creates), with any adapter rules or
PodMonitorings beside it (:mod:`autoscale.documents`); metric names may take any pipeline's form.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from headroom.autoscale import cli_runs, versions
from headroom.autoscale.cli_runs import load_autoscaler_file
from headroom.autoscale.controller import ControllerSettings, HpaController, ScaleTarget
from headroom.autoscale.documents import Autoscaler
from headroom.autoscale.errors import AutoscaleError
from headroom.autoscale.manifest import INITIAL_REPLICAS, spec_to_dict
from headroom.autoscale.metrics_source import StaticMetrics
from headroom.autoscale.pipelines import Pipeline, adapter_name
from headroom.autoscale.podlist import described_pods, pods_from_yaml
from headroom.autoscale.pods import PodPhase, PodSample
from headroom.autoscale.quantity import to_milli
from headroom.autoscale.servers import ModelServer
from headroom.autoscale.spec import MetricSpec, SourceType
from headroom.autoscale.traps import find_traps
from headroom.cli.environment import reads
from headroom.contract.server_metrics import KINDS
from headroom.contract.settings import from_env
from headroom.errors import CommandError

PIPELINES = tuple(p.value for p in Pipeline)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("autoscale", help="HPA simulation and autoscaling guidance for LLM pools")
    commands = parser.add_subparsers(dest="autoscale_command", required=True, metavar="COMMAND")

    check = commands.add_parser("check", help="validate an HPA or KEDA ScaledObject for a Kubernetes release, "
                                              "list traps", **reads(ControllerSettings))
    check.add_argument("--hpa", required=True, type=Path, help="HPA or ScaledObject (YAML, with companions)")
    check.add_argument("--kubernetes-version", default=None, metavar="X.Y",
                       help="the cluster's release: validate against its schema and flag fields it rejects or "
                            "ignores (default: the newest schema known)")
    check.add_argument("--metrics-pipeline", choices=PIPELINES, default=None,
                       help="flag metric names this pipeline does not serve")
    check.add_argument("--model-server", choices=KINDS, default=None, help="flag metrics this server does not export")
    check.add_argument("--vllm-version", default=ModelServer().version, help="vLLM release (major.minor)")
    check.add_argument("--load-delay-s", type=float, default=None, help="model load time, for the slow-load trap")
    check.set_defaults(run=run_check)

    decide = commands.add_parser("decide", help="one HPA reconcile from given metric values and pods",
                                 **reads(ControllerSettings))
    decide.add_argument("--hpa", required=True, type=Path, help="HPA or ScaledObject (YAML)")
    decide.add_argument("--replicas", required=True, type=int, help="current replica count (spec.replicas)")
    decide.add_argument("--metric", action="append", default=[], metavar="NAME=V1,V2,...",
                        help="values as quantities: per pod for Pods/Resource (in pod order, or POD:VALUE), "
                             "one for Object, one per series for External; NAME in any pipeline's form (repeatable)")
    decide.add_argument("--pods", type=Path, default=None, help="the pods, as `kubectl get pods -o yaml` prints them")
    decide.add_argument("--requests", default="", metavar="cpu=500m,memory=1Gi",
                        help="each described pod's resource requests (for Utilization targets)")
    decide.add_argument("--not-ready", type=int, default=0, help="described pods Running but not Ready")
    decide.add_argument("--pending", type=int, default=0, help="described pods still Pending")
    decide.set_defaults(run=run_decide)
    cli_runs.register(commands)


def run_check(args: argparse.Namespace) -> int:
    import kubernetes_validate

    console = Console(soft_wrap=True)
    autoscaler = load_autoscaler_file(args.hpa)
    spec = autoscaler.spec
    version = _schema_version(args.kubernetes_version)
    try:
        kubernetes_validate.validate(spec_to_dict(spec), version, strict=True)
    except kubernetes_validate.ValidationError as err:
        raise CommandError(f"{args.hpa}: fails the autoscaling/v2 schema of Kubernetes {version}: "
                           f"{err.message}") from err
    made = " (the HPA KEDA creates from it)" if autoscaler.kind == "ScaledObject" else ""
    console.print(f"schema: valid autoscaling/v2 HorizontalPodAutoscaler for Kubernetes {version}{made}")
    console.print(f"{spec.namespace}/{spec.name} → {spec.target_ref.kind}/{spec.target_ref.name}, "
                  f"replicas {spec.min_replicas}..{spec.max_replicas}, "
                  f"{'behavior' if spec.behavior else 'legacy (no behavior)'}")
    for metric in spec.metrics:
        query = autoscaler.queries.get(metric.name)
        console.print(f"  {metric.label}: {metric.target.type.value} {_amount(metric)}"
                      + (f" of {query.text}" if query else ""))
    if spec.initial_replicas is not None:
        console.print(f"its figures start from {spec.initial_replicas} serving replicas ({INITIAL_REPLICAS}): scale "
                      f"{spec.target_ref.kind}/{spec.target_ref.name} to them before applying it", soft_wrap=True)
    try:
        server = ModelServer(args.model_server, args.vllm_version) if args.model_server else None
        traps = find_traps(autoscaler, from_env(ControllerSettings).tolerance, args.load_delay_s,
                           args.kubernetes_version, Pipeline(args.metrics_pipeline) if args.metrics_pipeline else None,
                           server)
    except AutoscaleError as err:
        raise CommandError(str(err)) from err
    for trap in traps:
        console.print(f"[yellow]warning[/yellow] {trap.code}: {trap.message}", soft_wrap=True)
    return 0


def _schema_version(requested: str | None) -> str:
    """The newest schema ``kubernetes-validate`` ships for a release no newer than ``requested``."""
    from kubernetes_validate.utils import all_versions

    known: list[str] = all_versions()
    if requested is None:
        return known[-1]
    try:
        wanted = versions.release(requested)
    except AutoscaleError as err:
        raise CommandError(f"--kubernetes-version: {err}") from err
    fitting = [v for v in known if versions.release(v) <= wanted]
    if not fitting or wanted > versions.release(known[-1]):
        raise CommandError(f"--kubernetes-version {requested}: no autoscaling/v2 schema for it "
                           f"(schemas known: {known[0]} to {known[-1]})")
    return fitting[-1]


def run_decide(args: argparse.Namespace) -> int:
    autoscaler = load_autoscaler_file(args.hpa)
    spec = autoscaler.spec
    if args.replicas < 0:
        raise CommandError(f"--replicas must be >= 0, got {args.replicas}")
    try:
        if args.pods is not None:
            pods = pods_from_yaml(args.pods.read_text())
            now = time.time()
        else:
            requests = dict(_pair(p, "--requests") for p in args.requests.split(",") if p.strip())
            pods = described_pods(args.replicas, requests, args.not_ready, args.pending)
            settings = from_env(ControllerSettings)
            now = settings.cpu_initialization_period + settings.sync_period  # long after the pods started
    except OSError as err:
        raise CommandError(f"cannot read {args.pods}: {err.strerror or err}") from err
    except AutoscaleError as err:
        raise CommandError(str(err)) from err
    values = dict(_metric_arg(text) for text in args.metric)
    reporting = [p.name for p in pods if p.phase is not PodPhase.PENDING]
    pod_values, objects, external = {}, {}, {}
    for metric in spec.metrics:
        given = next((values.pop(name) for name in _names(autoscaler, metric) if name in values), None)
        if given is None:
            continue
        if metric.source is SourceType.OBJECT:
            objects[metric.label] = given[0][1]
        elif metric.source is SourceType.EXTERNAL:
            external[metric.label] = [v for _, v in given]
        else:
            pod_values[metric.label] = _per_pod(given, reporting, metric, now)
    if values:
        raise CommandError(f"--metric {', '.join(sorted(values))}: not a metric of {args.hpa}")
    settings = from_env(ControllerSettings)
    target = ScaleTarget(args.replicas, pods)
    result = HpaController(spec, settings).sync(now, target, StaticMetrics(pod_values, objects, external))
    console = Console(soft_wrap=True)
    console.print(f"{spec.name}: {result.current} → {result.desired} ({result.reason})")
    table = Table()
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
    console.print(table)
    broken = [o for o in result.outcomes if o.proposal is None]
    if result.outcomes and len(broken) == len(result.outcomes):
        raise CommandError("no metric could be evaluated, so the HPA would not scale: "
                           + "; ".join(f"{o.metric.label}: {o.error}" for o in broken))
    return 0


def _names(autoscaler: Autoscaler, metric: MetricSpec) -> list[str]:
    """Every name ``--metric`` may use for ``metric``: its own, its label, and its series in any form."""
    names = [metric.name, metric.label]
    if metric.source not in (SourceType.RESOURCE, SourceType.CONTAINER_RESOURCE):
        try:
            signal = autoscaler.binding(metric).signal
        except AutoscaleError:
            return names
        names += [signal.value, adapter_name(signal)]
    return names


def _per_pod(given: list[tuple[str | None, int]], reporting: list[str], metric: MetricSpec,
             now: float) -> dict[str, PodSample]:
    if all(name is None for name, _ in given):
        if len(given) > len(reporting):
            raise CommandError(f"--metric {metric.name}: {len(given)} values for {len(reporting)} pods that are "
                               f"not Pending")
        return {pod: PodSample(v, timestamp=now) for pod, (_, v) in zip(reporting, given)}
    if any(name is None for name, _ in given):
        raise CommandError(f"--metric {metric.name}: give every value as POD:VALUE, or none")
    return {name: PodSample(v, timestamp=now) for name, v in given if name is not None}


def _metric_arg(text: str) -> tuple[str, list[tuple[str | None, int]]]:
    name, sep, values = text.rpartition("=")
    if not sep or not name or not values:
        raise CommandError(f"--metric {text!r}: expected NAME=V1,V2,...")
    parsed = []
    for item in values.split(","):
        pod, _, value = item.rpartition(":") if ":" in item else (None, "", item)
        try:
            parsed.append((pod or None, to_milli(value)))
        except AutoscaleError as err:
            raise CommandError(f"--metric {text!r}: {err}") from err
    return name, parsed


def _pair(text: str, flag: str) -> tuple[str, int]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise CommandError(f"{flag} {text!r}: expected RESOURCE=QUANTITY")
    try:
        return key.strip(), to_milli(value.strip())
    except AutoscaleError as err:
        raise CommandError(f"{flag} {text!r}: {err}") from err


def _amount(metric: MetricSpec) -> str:
    amount = metric.target.amount
    return f"{amount}%" if metric.target.type.value == "Utilization" else f"{amount / 1000:g}"
