"""Reading a component's Prometheus ``/metrics`` into plain numbers for the live view and the report."""

from __future__ import annotations

import urllib.request
from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(url: str, timeout_s: float = 2.0) -> Samples:
    """Every sample at ``url`` by name (``_total``, ``_sum``, ``_count``, ``_bucket`` names kept as exposed)."""
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        text = response.read().decode()
    samples: Samples = defaultdict(list)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name].append((sample.labels, sample.value))
    return dict(samples)


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name`` over samples whose labels include ``labels``."""
    return sum(value for sample_labels, value in samples.get(name, [])
               if all(sample_labels.get(k) == v for k, v in labels.items()))


def by_label(samples: Samples, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for sample_labels, value in samples.get(name, []):
        out[sample_labels.get(label, "")] += value
    return dict(out)
