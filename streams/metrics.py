"""Prometheus metrics of the learning pipeline worker."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

INGESTED = Counter("headroom_telemetry_ingested", "Valid telemetry records processed.")
REPRESENTED = Counter("headroom_telemetry_requests_represented", "Completed requests the valid telemetry records "
                      "stand for: the sum of their sample weights (the records themselves when routers send all).")
DEAD_LETTERS = Counter("headroom_telemetry_dead_letters", "Invalid telemetry records sent to the dead-letter topic.")
DEAD_LETTER_FAILURES = Counter("headroom_telemetry_dead_letter_failures",
                               "Dead letters the broker did not store at first (each is sent again), by error.",
                               ["error"])
IMPLAUSIBLE = Counter("headroom_telemetry_implausible", "Records dead-lettered for a completion time implausible "
                      "against the worker's clock, by direction.", ["direction"])
UNADMITTED = Counter("headroom_telemetry_unadmitted", "Valid records no window admitted: older than its clock's "
                     "maximum age.")
FORGOTTEN = Counter("headroom_window_rows_forgotten", "Window rows dropped by requests to forget (llm-d's /flush).")
DUPLICATES = Counter("headroom_telemetry_duplicates", "Records skipped because the window already had them.")
WINDOW_ROWS = Gauge("headroom_window_rows", "Rows in a window.", ["pool_key", "target"])
WINDOW_STRATA = Gauge("headroom_window_strata", "Occupied strata of a window.", ["pool_key", "target"])
DRIFTS = Counter("headroom_drift_events", "Drift detections on live prediction error.", ["pool_key", "target"])
RETRAINS = Counter("headroom_retrains", "Training rounds run.", ["pool_key", "target", "trigger"])
PROMOTIONS = Counter("headroom_model_promotions", "Candidates promoted and published.",
                     ["pool_key", "target", "objective"])
REJECTIONS = Counter("headroom_model_rejections", "Candidates the promotion gate discarded.",
                     ["pool_key", "target", "objective"])
PUBLISH_FENCED = Counter("headroom_model_publish_fenced", "Promoted candidates not published: the pool's home "
                         "partition belongs to another worker now.", ["pool_key", "target", "objective"])
MODEL_REPAIRS = Counter("headroom_model_repairs", "Newest model versions published again because something else "
                        "was the last message under their key, by what it was.", ["reason"])
TRAINING_FAILURES = Counter("headroom_training_failures", "Training rounds that raised.", ["pool_key", "target"])
MODEL_VERSION = Gauge("headroom_model_version", "Live model version.", ["pool_key", "target", "objective"])
MODEL_HOLDOUT_MAPE = Gauge("headroom_model_holdout_mape", "Holdout MAPE of the version promoted last (0.1 = 10%).",
                           ["pool_key", "target", "objective"])
TRAINING_SECONDS = Histogram("headroom_training_seconds", "Wall time of a training round (all objectives).",
                             buckets=(0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64))
