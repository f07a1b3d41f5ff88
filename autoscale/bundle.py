"""The files a recommendation writes: the autoscaler and what makes its metric exist, per pipeline.

- ``gmp`` — ``hpa.yaml`` (the HPA) and ``podmonitoring.yaml`` (GMP scrapes the pods, or the router
  for headroom's own signal; none for GKE's accelerator-memory system metric);
- ``prometheus-adapter`` — ``hpa.yaml`` and ``prometheus-adapter-values.yaml`` (the rule);
- ``keda`` — ``scaledobject.yaml`` (the ScaledObject, and a TriggerAuthentication when KEDA asks
  Google's managed Prometheus) and ``podmonitoring.yaml`` for that managed Prometheus.

:func:`autoscaler_file` names the file ``simulate --hpa`` and ``check --hpa`` take.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import yaml

from headroom.autoscale.documents import Autoscaler
from headroom.autoscale.keda import scaled_object
from headroom.autoscale.manifest import emit_manifest
from headroom.autoscale.pipelines import GMP_QUERY_URL, Pipeline, Workload, companions, pod_monitoring, series_query
from headroom.contract.scaling_signals import Signal


def autoscaler_file(pipeline: Pipeline) -> str:
    return "scaledobject.yaml" if pipeline is Pipeline.KEDA else "hpa.yaml"


def bundle(autoscaler: Autoscaler, signal: Signal, pipeline: Pipeline, workload: Workload) -> dict[str, str]:
    """File name → YAML text of every object to apply."""
    if pipeline is Pipeline.KEDA:
        spec = replace(autoscaler.spec, name=workload.name)
        files = {autoscaler_file(pipeline): _dump(scaled_object(spec, [series_query(signal, workload)], workload))}
        if workload.prometheus_url.startswith(GMP_QUERY_URL.split("/projects/")[0]):
            files["podmonitoring.yaml"] = _dump([pod_monitoring(signal, workload)])
        return files
    files = {autoscaler_file(pipeline): emit_manifest(autoscaler.spec)}
    extra = companions(signal, pipeline, workload)
    if extra:
        name = "prometheus-adapter-values.yaml" if pipeline is Pipeline.PROMETHEUS_ADAPTER else "podmonitoring.yaml"
        files[name] = _dump(extra)
    return files


def _dump(documents: list[dict[str, Any]]) -> str:
    text: str = yaml.safe_dump_all(documents, sort_keys=False)
    return text
