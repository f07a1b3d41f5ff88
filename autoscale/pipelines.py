"""The metric pipelines that serve a pool's signals to the HPA on GKE, and how each one names them.

- **gmp** — Google Cloud Managed Service for Prometheus scrapes the pods (a ``PodMonitoring``) and the
  Custom Metrics Stackdriver Adapter serves each series as ``prometheus.googleapis.com|<series>|gauge``
  (a ``Pods`` metric for per-pod series). Accelerator memory is GKE's system metric
  ``kubernetes.io|container|accelerator|memory_used`` (an ``External`` metric, no scrape needed).
- **prometheus-adapter** — your Prometheus scrapes the pods; an adapter rule per series exposes it
  as a ``Pods`` metric, renamed with ``:`` → ``_`` (``vllm_num_requests_waiting``); accelerator memory
  is an external rule, ``tpu_memory_used_bytes``.
- **keda** — a ``ScaledObject`` with a Prometheus trigger per metric; KEDA creates the HPA, whose
  ``External`` metric is named ``s<index>-prometheus`` and holds the query's one value. The query is a
  ``sum()`` over the pool's pods, so the ``AverageValue`` target is per replica — never ``max()``,
  which falls as pods are added (see :mod:`autoscale.traps`).

:func:`binding` goes the other way: any of these names (and the bare series) → the :class:`Binding`
the simulator replays. headroom's own signals are exported by the router with the model-server
pod's ``namespace`` and ``pod`` labels (:mod:`router.app.autoscale_signals`), so they flow the same way; the
router's pods are scraped with their own ``pod`` label left off, so the exported one stands.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from headroom.autoscale.errors import SpecError
from headroom.autoscale.promql import Query, parse_query
from headroom.autoscale.spec import MetricSpec, MetricTarget, SourceType, TargetType
from headroom.contract.scaling_signals import Signal

GMP_PREFIX, GMP_SUFFIX = "prometheus.googleapis.com|", "|gauge"
GKE_ACCELERATOR_MEMORY = ("kubernetes.io|container|accelerator|memory_used",
                          "kubernetes.io|node|accelerator|memory_used")
ADAPTER_HBM_NAME = "tpu_memory_used_bytes"
KEDA_METRIC = re.compile(r"^s(\d+)-prometheus$")
KEDA_SCALED_OBJECT_LABEL = "scaledobject.keda.sh/name"
TPU_DEVICE_PLUGIN_PORT = 2112
GMP_QUERY_URL = "https://monitoring.googleapis.com/v1/projects/PROJECT_ID/location/global/prometheus"


class Pipeline(enum.Enum):
    GMP = "gmp"
    PROMETHEUS_ADAPTER = "prometheus-adapter"
    KEDA = "keda"


@dataclass(frozen=True)
class Binding:
    """What one HPA metric reads in the pool: ``signal`` per pod (``aggregation`` None), or one value
    aggregated over the ready pods (``sum``, ``avg``, ``max``, ``min``) for External and Object metrics."""

    signal: Signal
    aggregation: str | None = None


@dataclass(frozen=True)
class Workload:
    """Where the pool runs: its Deployment (pods labelled ``app: <name>``), namespace, metrics port,
    the headroom router's app label and port, and the Prometheus query URL KEDA asks."""

    name: str = "model-server"
    namespace: str = "default"
    metrics_port: int | str = 8000  # vLLM serves /metrics on its API port
    router: str = "headroom-router"
    router_port: int | str = "health"  # the chart's router serves /metrics on its plain-HTTP health port
    prometheus_url: str = GMP_QUERY_URL
    scrape_interval_s: int = 15

    @property
    def pod_matcher(self) -> str:
        return f'namespace="{self.namespace}",pod=~"{self.name}-.*"'


def series_query(signal: Signal, workload: Workload) -> str:
    """The PromQL sum of ``signal`` over the workload's pods (what a KEDA trigger asks)."""
    if signal is Signal.HBM_USED_BYTES:
        return f'sum({signal.value}{{exported_namespace="{workload.namespace}"}})'
    return f"sum({signal.value}{{{workload.pod_matcher}}})"


def hpa_metric(signal: Signal, target_milli: int, pipeline: Pipeline, workload: Workload,
               index: int = 0) -> MetricSpec:
    """The ``spec.metrics`` entry that reads ``signal`` through ``pipeline`` (``index``: KEDA trigger)."""
    target = MetricTarget(TargetType.AVERAGE_VALUE, target_milli)
    if pipeline is Pipeline.KEDA:
        return MetricSpec(SourceType.EXTERNAL, f"s{index}-prometheus", target,
                          selector={KEDA_SCALED_OBJECT_LABEL: workload.name})
    if signal is Signal.HBM_USED_BYTES:
        if pipeline is Pipeline.GMP:
            return MetricSpec(SourceType.EXTERNAL, GKE_ACCELERATOR_MEMORY[0], target,
                              selector={"resource.labels.namespace_name": workload.namespace})
        return MetricSpec(SourceType.EXTERNAL, ADAPTER_HBM_NAME, target)
    name = GMP_PREFIX + signal.value + GMP_SUFFIX if pipeline is Pipeline.GMP else adapter_name(signal)
    return MetricSpec(SourceType.PODS, name, target)


def adapter_name(signal: Signal) -> str:
    """The custom-metrics name a prometheus-adapter rule gives ``signal``."""
    return ADAPTER_HBM_NAME if signal is Signal.HBM_USED_BYTES else signal.value.replace(":", "_")


def binding(metric: MetricSpec, queries: Mapping[str, Query] = {}) -> Binding:
    """The signal behind ``metric`` in any naming form (``queries``: metric name → its PromQL query,
    from KEDA triggers or adapter rules). Raises SpecError for a name no pipeline gives a pool series."""
    per_pod = metric.source is SourceType.PODS
    query = queries.get(metric.name)
    if query is None and KEDA_METRIC.match(metric.name):
        raise SpecError(f"metric {metric.label}: a KEDA metric; give the ScaledObject that defines it")
    if query is not None:
        return Binding(_signal(query.series, metric), None if per_pod else query.aggregation)
    if metric.name in GKE_ACCELERATOR_MEMORY or metric.name == ADAPTER_HBM_NAME:
        return Binding(Signal.HBM_USED_BYTES, None if per_pod else "sum")
    series = metric.name
    if series.startswith(GMP_PREFIX) and series.endswith(GMP_SUFFIX):
        series = series[len(GMP_PREFIX):-len(GMP_SUFFIX)]
    return Binding(_signal(series, metric), None if per_pod else "sum")


def _signal(series: str, metric: MetricSpec) -> Signal:
    for signal in Signal:
        if series in (signal.value, adapter_name(signal)):
            return signal
    known = ", ".join(s.value for s in Signal)
    raise SpecError(f"metric {metric.label}: {series!r} is no series a model server or headroom's router exports "
                    f"(known: {known})")


def companions(signal: Signal, pipeline: Pipeline, workload: Workload) -> list[dict[str, Any]]:
    """The objects that make ``signal`` exist for the HPA: scrape configs and adapter rules (KEDA's
    ScaledObject is written by :mod:`autoscale.keda`)."""
    if pipeline is Pipeline.PROMETHEUS_ADAPTER:
        return [adapter_values(signal, workload)]
    if signal is Signal.HBM_USED_BYTES and pipeline is Pipeline.GMP:
        return []  # a GKE system metric
    return [pod_monitoring(signal, workload)]


def pod_monitoring(signal: Signal, workload: Workload) -> dict[str, Any]:
    """A GMP ``PodMonitoring`` for the pods that export ``signal``: the model servers, the router for
    headroom's own signals, GKE's TPU device plugin for accelerator memory."""
    interval = f"{workload.scrape_interval_s}s"
    if signal is Signal.HBM_USED_BYTES:  # GKE's TPU device plugin serves the accelerators' memory
        return {"apiVersion": "monitoring.googleapis.com/v1", "kind": "PodMonitoring",
                "metadata": {"name": "tpu-device-plugin-metrics", "namespace": "kube-system"},
                "spec": {"selector": {"matchLabels": {"k8s-app": "tpu-device-plugin"}},
                         "endpoints": [{"port": TPU_DEVICE_PLUGIN_PORT, "interval": interval}]}}
    if signal.headroom_own:
        spec: dict[str, Any] = {
            "selector": {"matchLabels": {"app": workload.router}},
            "endpoints": [{"port": workload.router_port, "interval": interval, "path": "/metrics"}],
            # the router labels each series with the model-server pod; leave the router's own pod label off
            "targetLabels": {"metadata": ["container", "top_level_controller_name", "top_level_controller_type"]}}
        name = f"{workload.router}-autoscaling-signals"
    else:
        spec = {"selector": {"matchLabels": {"app": workload.name}},
                "endpoints": [{"port": workload.metrics_port, "interval": interval}]}
        name = f"{workload.name}-metrics"
    return {"apiVersion": "monitoring.googleapis.com/v1", "kind": "PodMonitoring",
            "metadata": {"name": name, "namespace": workload.namespace}, "spec": spec}


def adapter_values(signal: Signal, workload: Workload) -> dict[str, Any]:
    """prometheus-adapter Helm values with the rule that serves ``signal`` under :func:`adapter_name`."""
    if signal is Signal.HBM_USED_BYTES:
        rule = {"seriesQuery": signal.value, "resources": {"template": "<<.Resource>>"},
                "name": {"matches": f"^{signal.value}$", "as": ADAPTER_HBM_NAME},
                "metricsQuery": series_query(signal, workload)}
        return {"rules": {"default": False, "external": [rule]}}
    labels = "namespace!=\"\",pod!=\"\""
    rule = {"seriesQuery": f"{signal.value}{{{labels}}}",
            "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
            "name": {"matches": f"^{re.escape(signal.value)}$", "as": adapter_name(signal)},
            "metricsQuery": "avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"}
    return {"rules": {"default": False, "custom": [rule]}}


def adapter_queries(values: Mapping[str, Any]) -> dict[str, Query]:
    """Metric name → query of the rules in prometheus-adapter values (``rules.custom`` / ``external``) or
    a plain adapter config (``rules`` / ``externalRules`` lists)."""
    rules = values.get("rules")
    if isinstance(rules, Mapping):
        custom, external = rules.get("custom") or [], rules.get("external") or []
    else:
        custom, external = rules or [], values.get("externalRules") or []
    queries = {}
    for kind, entries in (("custom", custom), ("external", external)):
        for rule in entries:
            exposed = (rule.get("name") or {}).get("as") or ""
            try:  # a rule for series the pool does not have cannot bind a metric; leave it out
                series = parse_query(str(rule.get("seriesQuery", ""))).series
                text = re.sub(r"<<[^>]*>>,?", "", str(rule.get("metricsQuery", "")).replace("<<.Series>>", series))
                aggregation = parse_query(text).aggregation if kind == "external" else None
            except SpecError:
                continue
            queries[exposed or series] = Query(series, aggregation, str(rule.get("metricsQuery", "")))
    return queries
