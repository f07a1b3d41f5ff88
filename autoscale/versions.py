"""Which Kubernetes release accepts, ignores or rejects the HPA fields an autoscaling recommendation uses.

- ``autoscaling/v2`` is served from 1.23 (GA); the schemas :mod:`kubernetes_validate` ships start at 1.25.
- ``behavior.scaleUp/scaleDown.tolerance`` (KEP-4951, feature gate ``HPAConfigurableTolerance``):
  absent before 1.33, so the API server rejects it; alpha in 1.33 and 1.34 — the gate is off by
  default, so the field is dropped on write and the cluster-wide 10 % applies; beta, on by default,
  from 1.35.
- ``ContainerResource`` metrics (gate ``HPAContainerMetrics``): alpha until 1.26 (off by default),
  beta from 1.27, GA in 1.30.
"""

from __future__ import annotations

from headroom.autoscale.errors import SpecError

TOLERANCE_FIELD = (1, 33)
TOLERANCE_ON_BY_DEFAULT = (1, 35)
CONTAINER_METRICS_ON_BY_DEFAULT = (1, 27)
AUTOSCALING_V2 = (1, 23)


def release(version: str) -> tuple[int, int]:
    """``"1.33"``, ``"v1.33.2"`` or ``"1.33.0-gke.100"`` → ``(1, 33)``."""
    parts = version.strip().lstrip("v").split(".")
    try:
        return int(parts[0]), int(parts[1].split("-")[0])
    except (IndexError, ValueError):
        raise SpecError(f"Kubernetes version {version!r}: expected major.minor, e.g. 1.33") from None


def tolerance_honored(version: str | None) -> bool:
    """Whether a cluster of ``version`` (None: unknown) applies a per-HPA tolerance by default."""
    return version is not None and release(version) >= TOLERANCE_ON_BY_DEFAULT
