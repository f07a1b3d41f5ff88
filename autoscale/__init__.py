"""Autoscaling guidance for LLM inference pools.

An exact offline model of the Kubernetes HorizontalPodAutoscaler controller (``autoscaling/v2``),
HPA manifests and KEDA ScaledObjects read and written in the naming of each metric pipeline GKE users
run (managed Prometheus, prometheus-adapter, KEDA), the signals each model server really exports (queue,
batch, KV-cache and accelerator memory; headroom's predicted TTFT), and recommendations that replay to
the figures they report.
"""
