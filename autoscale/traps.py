"""Known autoscaling traps for LLM servers, found in an HPA (or a KEDA ScaledObject) before it reaches a cluster.

Each finding names the metric or setting and says what goes wrong:

- ``small-target`` — a count-valued per-pod target below 10 with a 10 % band: one request more or less
  per pod already leaves the band, so the HPA reacts to noise;
- ``max-query`` — an External/Object metric over a ``max()`` (its KEDA or adapter query, or its name
  when no query is given): adding servers spreads load, the max falls while total load rises, and the
  HPA scales down under load;
- ``average-of-average`` — an ``AverageValue`` target on a query that already averages over the pods:
  the HPA then proposes ``ceil(avg / target)`` whatever the pod count (use ``sum()`` or a ``Value``);
- ``memory-bytes`` — raw memory bytes on vLLM/TGI, which preallocate the KV cache: flat while serving;
- ``queue-with-memory`` — queue size combined with KV-cache / memory usage (the guide says not to);
- ``slow-load`` — per-pod metrics with a scale-up policy that adds pods faster than they load: loading
  pods count as zero (missing) in every sync until they serve, so the HPA keeps adding;
- ``broken-metric`` — several metrics: while any one is unavailable the HPA never scales down;
- ``legacy-behavior`` — no ``behavior``: scale-down waits 300 s, scale-up is capped at
  max(2×current, 4) per sync and no policies apply;
- ``unexported-metric`` — a series the pool's model server does not export (JetStream's slots on vLLM);
- ``pipeline-name`` — a metric name the chosen pipeline does not serve (GMP needs
  ``prometheus.googleapis.com|<series>|gauge``, prometheus-adapter a rule's name, KEDA ``s<i>-prometheus``);
- ``tolerance-rejected`` / ``tolerance-ignored`` / ``container-metrics-gate`` / ``autoscaling-v2`` — fields the
  target Kubernetes release rejects or silently drops (:mod:`autoscale.versions`);
- ``placeholder`` — a KEDA trigger still asking the ``PROJECT_ID`` of the example query URL: KEDA gets no
  metric and the HPA never scales.
"""

from __future__ import annotations

from dataclasses import dataclass

from headroom.autoscale import versions
from headroom.autoscale.documents import Autoscaler
from headroom.autoscale.errors import SpecError
from headroom.autoscale.pipelines import (
    GKE_ACCELERATOR_MEMORY,
    GMP_PREFIX,
    GMP_SUFFIX,
    KEDA_METRIC,
    Pipeline,
    adapter_name,
)
from headroom.autoscale.promql import aggregates_with_max
from headroom.autoscale.servers import ModelServer
from headroom.autoscale.spec import HpaSpec, MetricSpec, SourceType, TargetType
from headroom.contract.scaling_signals import Signal

COUNT_SIGNALS = (Signal.QUEUE_SIZE, Signal.PREFILL_BACKLOG, Signal.BATCH_SIZE)
QUEUE_SIGNALS = (Signal.QUEUE_SIZE, Signal.PREFILL_BACKLOG)
MEMORY_SIGNALS = (Signal.KV_CACHE_USAGE, Signal.GPU_CACHE_USAGE, Signal.HBM_USED_BYTES, Signal.ACCELERATOR_MEMORY)


@dataclass(frozen=True)
class Trap:
    code: str
    message: str


def find_traps(autoscaler: Autoscaler | HpaSpec, tolerance: float = 0.1, load_delay_s: float | None = None,
               kubernetes_version: str | None = None, pipeline: Pipeline | None = None,
               model_server: ModelServer | None = None) -> list[Trap]:
    """Every known trap (``tolerance``: the cluster default; ``load_delay_s``: model load time;
    ``kubernetes_version``, ``pipeline`` and ``model_server``: the target cluster's, when known)."""
    if isinstance(autoscaler, HpaSpec):
        autoscaler = Autoscaler(autoscaler)
    spec = autoscaler.spec
    traps = []
    signals = {m.label: _signal(autoscaler, m) for m in spec.metrics}
    band = tolerance
    if spec.behavior is not None and spec.behavior.scale_up.tolerance is not None:
        band = spec.behavior.scale_up.tolerance
    for metric in spec.metrics:
        signal = signals[metric.label]
        query = autoscaler.queries.get(metric.name)
        pooled = metric.source in (SourceType.EXTERNAL, SourceType.OBJECT)
        if (metric.source is SourceType.PODS and signal in COUNT_SIGNALS
                and metric.target.amount * band < 1000):
            traps.append(Trap("small-target", f"{metric.label}: target {metric.target.amount / 1000:g} with a "
                                              f"{band:.0%} band — one request per pod leaves the band"))
        if pooled and (aggregates_with_max(query.text) if query else "max" in metric.name.lower()):
            shown = f"query {query.text!r}" if query else "its name"
            traps.append(Trap("max-query", f"{metric.label}: {shown} takes a max() over servers, which falls as "
                                           f"servers are added; scale on sum() with an AverageValue target"))
        if (pooled and query is not None and query.aggregation == "avg"
                and metric.target.type is TargetType.AVERAGE_VALUE):
            traps.append(Trap("average-of-average", f"{metric.label}: an AverageValue target on {query.text!r}, "
                                                    f"already an average: the HPA proposes ceil(avg / target) "
                                                    f"whatever the pod count; use sum() or a Value target"))
        if metric.source in (SourceType.RESOURCE, SourceType.CONTAINER_RESOURCE) and metric.name == "memory":
            traps.append(Trap("memory-bytes", f"{metric.label}: vLLM and TGI preallocate accelerator memory, "
                                              f"so memory bytes stay flat; use KV-cache usage"))
        if pipeline is not None and signal is not None:
            traps += _pipeline_name(metric, signal, pipeline, autoscaler)
        if model_server is not None and signal is not None and not model_server.serves(signal):
            traps.append(Trap("unexported-metric", f"{metric.label}: a {model_server.label} pool does not export "
                                                   f"{signal.value}; the HPA would find no metric and never scale"))
    if any(s in QUEUE_SIGNALS for s in signals.values()) and any(s in MEMORY_SIGNALS for s in signals.values()):
        traps.append(Trap("queue-with-memory", "queue size and KV-cache/memory usage together: pick one "
                                               "(queue for throughput, KV cache for utilization)"))
    per_pod = any(m.source is SourceType.PODS for m in spec.metrics)
    if per_pod and load_delay_s and spec.behavior is not None:
        fastest = min(p.period_seconds for p in spec.behavior.scale_up.policies)
        if fastest < load_delay_s and spec.behavior.scale_up.stabilization_window_seconds in (0, None):
            traps.append(Trap("slow-load", f"pods load for {load_delay_s:g} s but scale-up policies act every "
                                           f"{fastest} s: loading pods count as zero and the HPA overshoots; "
                                           f"lengthen the period or add a scale-up window"))
    if len(spec.metrics) > 1:
        traps.append(Trap("broken-metric", "several metrics: while any one is unavailable the HPA will not "
                                           "scale down"))
    if spec.behavior is None:
        traps.append(Trap("legacy-behavior", "no behavior: 300 s scale-down window, scale-up capped at "
                                             "max(2×current, 4) per sync"))
    if kubernetes_version is not None:
        traps += version_traps(spec, kubernetes_version)
    return traps + placeholder_traps(autoscaler)


def placeholder_traps(autoscaler: Autoscaler) -> list[Trap]:
    """KEDA triggers whose server address still holds the example's ``PROJECT_ID``."""
    triggers = (autoscaler.document.get("spec") or {}).get("triggers") or [] if autoscaler.kind == "ScaledObject" else []
    return [Trap("placeholder", f"spec.triggers[{index}].metadata.serverAddress asks {address}: replace PROJECT_ID "
                                f"with your Google Cloud project, or KEDA gets no metric and never scales")
            for index, trigger in enumerate(triggers)
            if "PROJECT_ID" in (address := str(((trigger or {}).get("metadata") or {}).get("serverAddress", "")))]


def version_traps(spec: HpaSpec, kubernetes_version: str) -> list[Trap]:
    """Fields of ``spec`` that Kubernetes ``kubernetes_version`` rejects or drops."""
    release = versions.release(kubernetes_version)
    shown = f"{release[0]}.{release[1]}"
    traps = []
    if release < versions.AUTOSCALING_V2:
        traps.append(Trap("autoscaling-v2", f"Kubernetes {shown} does not serve autoscaling/v2 (GA in 1.23)"))
    tolerances = [] if spec.behavior is None else [
        name for name, rules in (("scaleUp", spec.behavior.scale_up), ("scaleDown", spec.behavior.scale_down))
        if rules.tolerance is not None]
    for name in tolerances:
        if release < versions.TOLERANCE_FIELD:
            traps.append(Trap("tolerance-rejected", f"behavior.{name}.tolerance: Kubernetes {shown} has no such "
                                                    f"field (added in 1.33); the API server rejects the HPA"))
        elif release < versions.TOLERANCE_ON_BY_DEFAULT:
            traps.append(Trap("tolerance-ignored", f"behavior.{name}.tolerance: alpha in Kubernetes {shown}; "
                                                   f"unless the HPAConfigurableTolerance feature gate is on, the "
                                                   f"field is dropped and the cluster-wide 10 % applies "
                                                   f"(on by default from 1.35)"))
    if release < versions.CONTAINER_METRICS_ON_BY_DEFAULT:
        for metric in spec.metrics:
            if metric.source is SourceType.CONTAINER_RESOURCE:
                traps.append(Trap("container-metrics-gate", f"{metric.label}: ContainerResource metrics need the "
                                                            f"HPAContainerMetrics feature gate, off by default "
                                                            f"before 1.27"))
    return traps


def _signal(autoscaler: Autoscaler, metric: MetricSpec) -> Signal | None:
    if metric.source in (SourceType.RESOURCE, SourceType.CONTAINER_RESOURCE):
        return None
    try:
        return autoscaler.binding(metric).signal
    except SpecError:
        return None


def _pipeline_name(metric: MetricSpec, signal: Signal, pipeline: Pipeline, autoscaler: Autoscaler) -> list[Trap]:
    if pipeline is Pipeline.KEDA:
        expected = "s<index>-prometheus" if not KEDA_METRIC.match(metric.name) else metric.name
    elif signal is Signal.HBM_USED_BYTES:
        expected = GKE_ACCELERATOR_MEMORY[0] if pipeline is Pipeline.GMP else adapter_name(signal)
        if metric.name in GKE_ACCELERATOR_MEMORY and pipeline is Pipeline.GMP:
            expected = metric.name
    elif pipeline is Pipeline.GMP:
        expected = GMP_PREFIX + signal.value + GMP_SUFFIX
    else:
        expected = metric.name if metric.name in autoscaler.queries else adapter_name(signal)
    if metric.name == expected:
        return []
    return [Trap("pipeline-name", f"{metric.label}: the {pipeline.value} pipeline does not serve this name; "
                                  f"it serves {signal.value} as {expected!r}")]
