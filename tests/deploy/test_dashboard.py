"""The Grafana dashboard queries only metrics (and labels) that the router, the prediction servers and
the worker really export: names are read from their registries, not from a list kept by hand."""

from __future__ import annotations

import json
import re

import prometheus_client
import pytest

import headroom.streams.metrics  # noqa: F401 - registers the worker's metrics in the default registry
from headroom.predictor.metrics import PredictorMetrics
from headroom.predictor.runtime import ModelRuntime
from headroom.router.control.metrics import RouterMetrics
from headroom.router.control.telemetry_sink import TelemetryCounts
from tests.deploy.resources import CHART
from tests.keys import TRUST

DASHBOARD = json.loads((CHART / "dashboards" / "headroom.json").read_text())
SCRAPE_LABELS = {"namespace", "pod", "instance", "job", "le"}  # added by the scrape, or the histogram's own
PROMQL = {"sum", "max", "min", "avg", "rate", "increase", "histogram_quantile", "by", "without", "label_values"}


def exported() -> dict[str, set[str]]:
    """Every sample name the three components export -> the labels it carries."""
    router = RouterMetrics()
    router.report_telemetry(TelemetryCounts())
    registries = [router.registry, PredictorMetrics(ModelRuntime(trust=TRUST)).registry, prometheus_client.REGISTRY]
    names: dict[str, set[str]] = {}
    for registry in registries:
        for family in registry.collect():
            if not family.name.startswith(("headroom_", "inference_objective_")):
                continue
            suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                        "gauge": ("",)}[family.type]
            labels = set(getattr(family, "_labelnames", ())) | {k for s in family.samples for k in s.labels}
            labels |= _declared_labels(registry, family.name)
            for suffix in suffixes:
                names[family.name + suffix] = labels
    return names


def _declared_labels(registry, name: str) -> set[str]:
    """Label names of a metric that has no samples yet (a labelled metric before its first observation)."""
    collectors = getattr(registry, "_names_to_collectors", {})
    metric = collectors.get(name) or collectors.get(name + "_total")
    return set(getattr(metric, "_labelnames", ()))


def queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every panel target and every templating query."""
    found = [(panel["title"], target["expr"]) for panel in DASHBOARD["panels"] for target in panel.get("targets", [])]
    for variable in DASHBOARD["templating"]["list"]:
        if variable["type"] == "query":
            found.append((f"variable {variable['name']}", variable["definition"]))
    return found


def test_the_dashboard_queries_something():
    assert len(queries()) >= 30


@pytest.mark.parametrize("title, expr", queries(), ids=[t for t, _ in queries()])
def test_every_queried_metric_and_label_exists(title, expr):
    names = exported()
    for metric, selector in re.findall(r"\b((?:headroom|inference_objective)_[a-z0-9_]+)(\{[^}]*\})?", expr):
        assert metric in names, f"{title}: {metric} is exported by no component"
        for label in re.findall(r"([a-z_]+)\s*=~?", selector):
            assert label in names[metric] | SCRAPE_LABELS, f"{title}: {metric} has no label {label!r}"
    for grouping in re.findall(r"\bby \(([^)]*)\)", expr):
        for label in (g.strip() for g in grouping.split(",")):
            carriers = [m for m in re.findall(r"\b((?:headroom|inference_objective)_[a-z0-9_]+)", expr)]
            assert any(label in names[m] | SCRAPE_LABELS for m in carriers), f"{title}: no metric has {label!r}"


def test_the_dashboard_covers_what_operators_watch():
    text = json.dumps(DASHBOARD)
    for metric in ("headroom_router_decisions_total", "headroom_router_heuristic_decisions_total",
                   "inference_objective_request_predicted_ttft_seconds", "inference_objective_request_tpot_seconds",
                   "inference_objective_request_ttft_slo_violation_total", "headroom_predictor_model_version",
                   "headroom_drift_events_total", "headroom_telemetry_ingested_total",
                   "headroom_telemetry_dead_letters_total", "headroom_router_telemetry_delivery_total"):
        assert metric in text
