"""Known autoscaling traps for LLM servers, found in an HPA spec before it reaches a cluster.

Each finding names the metric or setting and says what goes wrong:

- ``small-target`` — a count-valued per-pod target below 10 with a 10 % band: one request more or less
  per pod already leaves the band, so the HPA reacts to noise;
- ``max-query`` — an External/Object metric whose name suggests a ``max()`` aggregation: adding servers
  spreads load, the max can fall while total load rises, and the HPA scales down under load;
- ``memory-bytes`` — raw memory bytes on vLLM/TGI, which preallocate the KV cache: flat while serving;
- ``queue-with-memory`` — queue size combined with KV-cache / memory usage (the guide says not to);
- ``slow-load`` — per-pod metrics with a scale-up policy that adds pods faster than they load: loading
  pods count as zero (missing) in every sync until they serve, so the HPA keeps adding;
- ``broken-metric`` — several metrics: while any one is unavailable the HPA never scales down;
- ``legacy-behavior`` — no ``behavior``: scale-down waits 300 s, scale-up is capped at
  max(2×current, 4) per sync and no policies apply.
"""

from __future__ import annotations

from dataclasses import dataclass

from headroom.autoscale.spec import HpaSpec, SourceType, TargetType

COUNT_METRICS = ("num_requests_waiting", "prefill_backlog", "queue", "num_requests_running")
MEMORY_METRICS = ("kv_cache_usage", "memory")


@dataclass(frozen=True)
class Trap:
    code: str
    message: str


def find_traps(spec: HpaSpec, tolerance: float = 0.1, load_delay_s: float | None = None) -> list[Trap]:
    """Every known trap in ``spec`` (``tolerance``: the cluster default; ``load_delay_s``: model load time)."""
    traps = []
    names = [m.name.lower() for m in spec.metrics]
    for metric in spec.metrics:
        name = metric.name.lower()
        band = tolerance
        if spec.behavior is not None and spec.behavior.scale_up.tolerance is not None:
            band = spec.behavior.scale_up.tolerance
        if (metric.target.type is TargetType.AVERAGE_VALUE and any(k in name for k in COUNT_METRICS)
                and metric.target.amount * band < 1000):
            traps.append(Trap("small-target", f"{metric.label}: target {metric.target.amount / 1000:g} with a "
                                              f"{band:.0%} band — one request per pod leaves the band"))
        if metric.source in (SourceType.EXTERNAL, SourceType.OBJECT) and "max" in name:
            traps.append(Trap("max-query", f"{metric.label}: a max() over servers falls as servers are added; "
                                           f"scale on sum() or a per-pod average instead"))
        if metric.source in (SourceType.RESOURCE, SourceType.CONTAINER_RESOURCE) and name == "memory":
            traps.append(Trap("memory-bytes", f"{metric.label}: vLLM and TGI preallocate accelerator memory, "
                                              f"so memory bytes stay flat; use KV-cache usage"))
    if any(k in n for n in names for k in COUNT_METRICS[:3]) and any(k in n for n in names for k in MEMORY_METRICS):
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
    return traps
