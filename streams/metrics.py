"""Prometheus metrics of the learning pipeline worker, declared once (:mod:`headroom.metric_table`), in the
process's default registry (:data:`WORKER`), which the worker's metrics endpoint serves."""

from __future__ import annotations

from prometheus_client import REGISTRY

from headroom.metric_table import MetricTable, counter, gauge, histogram

WINDOW = ("pool_key", "target")
MODEL = (*WINDOW, "objective")


class WorkerMetrics(MetricTable):
    """The worker's metrics."""

    ingested = counter("headroom_telemetry_ingested", "Valid telemetry records processed.")
    represented = counter("headroom_telemetry_requests_represented", "Completed requests the valid telemetry "
                          "records stand for: the sum of their sample weights (the records themselves when routers "
                          "send all).")
    dead_letters = counter("headroom_telemetry_dead_letters", "Invalid telemetry records sent to the dead-letter "
                           "topic.")
    dead_letter_failures = counter("headroom_telemetry_dead_letter_failures", "Dead letters the broker did not store "
                                   "at first (each is sent again), by error.", "error")
    implausible = counter("headroom_telemetry_implausible", "Records dead-lettered for a completion time implausible "
                          "against the worker's clock, by direction.", "direction")
    unadmitted = counter("headroom_telemetry_unadmitted", "Valid records no window admitted: older than its clock's "
                         "maximum age.")
    forgotten = counter("headroom_window_rows_forgotten", "Window rows dropped by requests to forget (llm-d's "
                        "/flush).")
    duplicates = counter("headroom_telemetry_duplicates", "Records skipped because the window already had them.")
    window_rows = gauge("headroom_window_rows", "Rows in a window.", *WINDOW)
    window_strata = gauge("headroom_window_strata", "Occupied strata of a window.", *WINDOW)
    drifts = counter("headroom_drift_events", "Drift detections on live prediction error.", *WINDOW)
    retrains = counter("headroom_retrains", "Training rounds run.", *WINDOW, "trigger")
    promotions = counter("headroom_model_promotions", "Candidates promoted and published.", *MODEL)
    rejections = counter("headroom_model_rejections", "Candidates the promotion gate discarded.", *MODEL)
    publish_fenced = counter("headroom_model_publish_fenced", "Promoted candidates not published: the pool's home "
                             "partition belongs to another worker now.", *MODEL)
    model_repairs = counter("headroom_model_repairs", "Newest model versions published again because something else "
                            "was the last message under their key, by what it was.", "reason")
    training_failures = counter("headroom_training_failures", "Training rounds that raised.", *WINDOW)
    model_version = gauge("headroom_model_version", "Live model version.", *MODEL)
    model_holdout_mape = gauge("headroom_model_holdout_mape", "Holdout MAPE of the version promoted last (0.1 = "
                               "10%).", *MODEL)
    training_seconds = histogram("headroom_training_seconds", "Wall time of a training round (all objectives).",
                                 buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64))


WORKER = WorkerMetrics(REGISTRY)
