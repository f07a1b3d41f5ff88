"""Prometheus metrics of one prediction server, in its own registry so instances never share state.

Request metrics are recorded as calls are served, on the gRPC API and on llm-d's HTTP API alike (rows,
predictions, batch sizes, time to serve; calls by gRPC status code and by HTTP route and status; the HTTP
answers given with the prior, :mod:`predictor.llmd_api`); the outcomes of the start-up replay of the model
topic (:mod:`predictor.replay`) once it ends; model versions, ages and update outcomes are read from the
runtime at scrape time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping

from prometheus_client.core import Metric

from headroom.metric_table import Family, MetricTable, counter, histogram, read_counter, read_gauge
from headroom.predictor.runtime import ApplyResult, ModelRuntime

BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
MODEL_LABELS = ("pool_key", "target", "objective")
LATENCY_BUCKETS = (5e-5, 1e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25)


class PredictorMetrics(MetricTable):
    """One prediction server's metrics, declared once; an instance holds them in a registry of its own."""

    requests = counter("headroom_predictor_requests", "gRPC prediction calls by status code.", "code")
    http_requests = counter("headroom_predictor_http_requests", "Calls of llm-d's prediction API (POST routes) by "
                            "route and HTTP status.", "route", "status")
    candidates = counter("headroom_predictor_candidates", "Candidate rows predicted (gRPC and HTTP).")
    predictions = counter("headroom_predictor_predictions", "Predictions served by a model (rows × models; gRPC and "
                          "HTTP).")
    prior_predictions = counter("headroom_predictor_http_prior_predictions", "Predictions llm-d's API answered with "
                                "the prior: no model of the target trained yet.", "target")
    batch_rows = histogram("headroom_predictor_batch_rows", "Candidate rows per call (gRPC and HTTP).",
                           buckets=BATCH_BUCKETS)
    latency = histogram("headroom_predictor_request_seconds", "Time to serve one prediction call (gRPC and HTTP).",
                        buckets=LATENCY_BUCKETS)
    update_delay = histogram("headroom_predictor_update_delay_seconds",
                             "From a model update's publication to its verdict here.",
                             buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 30, 300))
    replayed_updates = counter("headroom_predictor_replayed_updates", "Model-update messages read in the start-up "
                               "replay of the model topic, each once, by outcome ('tombstone' for a tombstone) and "
                               "rejection reason.", "outcome", "reason")
    # read from the runtime at scrape time
    model_version = read_gauge("headroom_predictor_model_version", "Live model version.", *MODEL_LABELS)
    model_age = read_gauge("headroom_predictor_model_age_seconds", "Seconds since the live version was trained.",
                           *MODEL_LABELS)
    model_signer = read_gauge("headroom_predictor_model_signer", "The key that signed the live version (1; signer "
                              "'unsigned' when unsigned models are allowed).", *MODEL_LABELS, "signer")
    model_updates = read_counter("headroom_predictor_model_updates", "Model-update messages by outcome and "
                                 "rejection reason.", "outcome", "reason")
    models_live = read_gauge("headroom_predictor_models_live", "Live model versions.")

    def __init__(self, runtime: ModelRuntime) -> None:
        super().__init__()
        self.registry.register(_RuntimeCollector(runtime))
        self._ok = self.requests.labels("OK")

    def served(self, rows: int, models: int, seconds: float) -> None:
        """A gRPC call answered."""
        self._ok.inc()
        self.answered(rows, models, seconds)

    def answered(self, rows: int, models: int, seconds: float) -> None:
        """``rows`` answered in one call of either API, ``models`` targets of each by a model."""
        self.candidates.inc(rows)
        self.predictions.inc(rows * models)
        self.batch_rows.observe(rows)
        self.latency.observe(seconds)

    def failed(self, code: str) -> None:
        self.requests.labels(code).inc()

    def http_call(self, route: str, status: int) -> None:
        self.http_requests.labels(route, str(status)).inc()

    def prior(self, target: str, rows: int) -> None:
        self.prior_predictions.labels(target).inc(rows)

    def update_applied(self, result: ApplyResult, delay_seconds: float) -> None:
        self.update_delay.observe(delay_seconds)

    def replayed(self, outcomes: Mapping[tuple[str, str], int]) -> None:
        """Count the start-up replay's messages, by (outcome, rejection reason or "")."""
        for (outcome, reason), count in outcomes.items():
            self.replayed_updates.labels(outcome, reason).inc(count)


def update_outcomes(family: Family, runtime: ModelRuntime) -> Metric:
    """The runtime's model-update messages by outcome and rejection reason, as ``family`` (a counter labelled
    ``outcome`` and ``reason``)."""
    updates = family.make()
    updates.add_metric(["applied", ""], runtime.applied)
    updates.add_metric(["stale", ""], runtime.stale)
    for reason, count in sorted(runtime.rejected.items()):
        updates.add_metric(["rejected", reason], count)
    return updates


class _RuntimeCollector:
    def __init__(self, runtime: ModelRuntime) -> None:
        self.runtime = runtime

    def collect(self) -> Iterator[Metric]:
        table = PredictorMetrics
        version, age, signer = table.model_version.make(), table.model_age.make(), table.model_signer.make()
        now = time.time()
        for model in self.runtime.live():
            values = [model.pool_key, model.target, model.objective]
            version.add_metric(values, model.version)
            age.add_metric(values, max(0.0, now - model.created_at))
            signer.add_metric([*values, model.signer or "unsigned"], 1)
        updates = update_outcomes(table.model_updates, self.runtime)
        ready = table.models_live.make()
        ready.add_metric([], len(self.runtime.live()))
        yield from (version, age, signer, updates, ready)
