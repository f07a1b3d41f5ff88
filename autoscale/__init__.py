"""Autoscaling guidance for LLM inference pools.

An exact offline model of the Kubernetes HorizontalPodAutoscaler controller (``autoscaling/v2``),
parsing and emitting HPA manifests, and the pool signals worth scaling on (queue size, batch slots,
KV-cache usage, accelerator memory, predicted TTFT headroom).
"""
