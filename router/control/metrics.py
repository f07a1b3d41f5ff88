"""The router's Prometheus metrics, each declared once (:mod:`headroom.metric_table`), in a registry of its own
(one per router).

Latency histograms follow SPEC §4: TTFT means E2E when the request does not stream.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from headroom.metric_table import MetricTable, counter, gauge, histogram, read_counter, read_gauge
from headroom.router.control.telemetry_sink import TelemetryCounts

if TYPE_CHECKING:
    from headroom.predictor.runtime import ModelRuntime

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
TPOT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28)
DECISION_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)


class RouterMetrics(MetricTable):
    """The router's metrics, declared once; an instance holds them in a registry of its own."""

    ttft = histogram("inference_objective_request_ttft_seconds",
                     "Observed time to first token (E2E when not streaming).", buckets=LATENCY_BUCKETS)
    predicted_ttft = histogram("inference_objective_request_predicted_ttft_seconds",
                               "Predicted TTFT of the chosen server.", buckets=LATENCY_BUCKETS)
    tpot = histogram("inference_objective_request_tpot_seconds", "Observed time per output token.",
                     buckets=TPOT_BUCKETS)
    predicted_tpot = histogram("inference_objective_request_predicted_tpot_seconds",
                               "Predicted TPOT of the chosen server.", buckets=TPOT_BUCKETS)
    ttft_violations = counter("inference_objective_request_ttft_slo_violation",
                              "Requests whose observed TTFT exceeded their TTFT SLO.")
    tpot_violations = counter("inference_objective_request_tpot_slo_violation",
                              "Requests whose observed TPOT exceeded their TPOT SLO.")
    decisions = counter("headroom_router_decisions", "Scheduling decisions by profile.", "profile")
    heuristic_decisions = counter(
        "headroom_router_heuristic_decisions",
        "Decisions the heuristic profile made, by reason (opted-out, not-opted-in, warm-up, "
        "predictor-unavailable, no-model-for-pool, stale-metrics, prediction-failed, ...).", "reason")
    partial_fallbacks = counter(
        "headroom_router_partial_fallbacks",
        "Predicted decisions that scored some candidates with the heuristic, by those candidates' reason.", "reason")
    rejections = counter("headroom_router_admissions_rejected", "Sheddable requests rejected.")
    held = counter("headroom_router_requests_held", "Requests held at the router before they were sent: predicted "
                   "to miss their SLO everywhere in a burst (late-concentration-filter's holdCap).")
    holding = gauge("headroom_router_requests_holding", "Requests held at the router now.")
    decision_latency = histogram("headroom_router_decision_seconds", "Time to schedule one request.",
                                 buckets=DECISION_BUCKETS)
    model_version = gauge("headroom_router_model_version", "Model version of the last prediction used.", "target")
    request_errors = counter("headroom_router_request_errors", "Requests that failed, by kind.", "kind")
    telemetry = counter("headroom_router_telemetry_records", "Completed requests without a telemetry record, by "
                        "why: unusable, sampled_out, no_body, unauthenticated (delivery is "
                        "headroom_router_telemetry_delivery).", "outcome")
    upstream_failures = counter("headroom_router_upstream_failures", "Proxied attempts a server failed before the "
                                "first byte or mid-response, by reason.", "reason")
    upstream_retries = counter("headroom_router_upstream_retries", "Requests sent to another server after a "
                               "failure before the first byte.")
    upstream_resends = counter("headroom_router_upstream_resends", "Requests sent again on a new connection after "
                               "a kept-alive one closed as they went out.")
    upstream_ejections = counter("headroom_router_upstream_ejections", "Servers ejected by passive outlier "
                                 "detection.", "server")
    connections_refused = counter("headroom_router_connections_refused", "Client connections refused at the "
                                  "maxConnections limit, by listener.", "listener")
    telemetry_buffered = gauge("headroom_router_telemetry_buffered", "Telemetry records waiting for delivery to "
                               "Kafka.")
    unauthenticated = counter("headroom_router_unauthenticated", "Requests and streams refused for a missing or "
                              "unknown bearer token or gateway identity, and reports refused from "
                              "unauthenticated callers, by listener.", "listener")
    # read at scrape time, once registered (report_telemetry, report_corrections, ModelUpdateCollector)
    telemetry_delivery = read_counter("headroom_router_telemetry_delivery", "Telemetry records handed to Kafka, "
                                      "by outcome: delivered, failed after buffering, dropped (buffer full).",
                                      "outcome")
    latency_correction = read_gauge("headroom_router_latency_correction", "What each server's predictions are "
                                    "multiplied by, per target: how far its latencies have lately departed from "
                                    "the models' (1: not at all).", "server", "target")
    model_updates = read_counter("headroom_router_model_updates", "Model-update messages by outcome and rejection "
                                 "reason.", "outcome", "reason")

    def __init__(self) -> None:
        super().__init__()
        self._children: dict[tuple[MetricWrapperBase, str], Any] = {}  # (metric, label value) -> its child (child())

    def child(self, metric: MetricWrapperBase, label: str) -> Any:
        """``metric.labels(label)``, looked up once per label value: prometheus_client's ``labels`` validates and
        takes a lock on every call. For labels of few values (profiles, reasons, targets)."""
        key = (metric, label)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(label)
        return child

    def report_telemetry(self, counts: TelemetryCounts) -> None:
        """Export ``counts`` (the sink's :class:`~router.control.telemetry_sink.TelemetryCounts`), read at scrape time."""
        self.registry.register(_TelemetryDelivery(counts))

    def report_corrections(self, corrections: Callable[[], Iterator[tuple[str, str, float]]]) -> None:
        """Export each server's latency correction per target, ``corrections()`` read at scrape time."""
        self.registry.register(_LatencyCorrections(corrections))


class _TelemetryDelivery:
    def __init__(self, counts: TelemetryCounts) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        family = RouterMetrics.telemetry_delivery.make()
        for outcome in ("delivered", "failed", "dropped"):
            family.add_metric([outcome], getattr(self.counts, outcome))
        yield family


class _LatencyCorrections:
    def __init__(self, corrections: Callable[[], Iterator[tuple[str, str, float]]]) -> None:
        self.corrections = corrections

    def collect(self) -> Iterator[Metric]:
        family = RouterMetrics.latency_correction.make()
        for server, target, factor in self.corrections():
            family.add_metric([server, target], factor)
        yield family


class ModelUpdateCollector(Collector):
    """The embedded predictor's model-update outcomes (``rejected`` by reason: ``unsigned``, ``unknown-key``,
    ``bad-signature``, ``replayed``, ...), read from its runtime at scrape time."""

    def __init__(self, runtime: ModelRuntime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        from headroom.predictor.metrics import update_outcomes
        yield update_outcomes(RouterMetrics.model_updates, self.runtime)
