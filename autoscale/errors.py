"""Errors raised by the autoscale package.

::

    AutoscaleError
     ├── SpecError            an HPA spec holds a value Kubernetes would reject
     │    └── ManifestError   a YAML manifest cannot be read as an autoscaling/v2 HPA
     └── MetricUnavailable    one metric cannot produce a replica proposal in this sync
"""

from __future__ import annotations

from headroom.errors import HeadroomError


class AutoscaleError(HeadroomError):
    """Base of every autoscale error."""


class SpecError(AutoscaleError, ValueError):
    """An HPA spec field holds a value the Kubernetes API would reject."""


class ManifestError(SpecError):
    """A manifest is not a readable ``autoscaling/v2`` HorizontalPodAutoscaler; names the field path."""


class MetricUnavailable(AutoscaleError):
    """A metric gave no usable value this sync (no pods, no samples, missing requests, ...).

    The controller treats the metric as invalid: it is left out of the max() and, like Kubernetes,
    blocks any scale-down while it stays broken.
    """
