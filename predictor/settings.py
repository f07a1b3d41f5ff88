"""Settings of one prediction server instance (the broker and topic come from :class:`KafkaSettings`)."""

from __future__ import annotations

from dataclasses import dataclass

from headroom.contract.settings import nested, setting
from headroom.contract.signing import SigningSettings
from headroom.contract.tls import ServerTls


@dataclass(frozen=True)
class PredictorSettings:
    host: str = setting("127.0.0.1", "HEADROOM_PREDICTOR_HOST",
                        "Address the gRPC and metrics servers bind to (0.0.0.0: every interface, as in a pod).")
    port: int = setting(50061, "HEADROOM_PREDICTOR_PORT", "gRPC port of the PredictionService (0: any free port).")
    metrics_port: int = setting(9461, "HEADROOM_PREDICTOR_METRICS_PORT",
                                "Plain-HTTP port of the metrics, /readyz and /healthz (0: any free port, -1: none).")
    workers: int = setting(2, "HEADROOM_PREDICTOR_WORKERS", "Threads serving gRPC calls (about one per core).")
    engine: str = setting("", "HEADROOM_PREDICTOR_ENGINE", "Tree engine: native or numpy (empty: native).")
    threads: int = setting(1, "HEADROOM_PREDICTOR_THREADS",
                           "Threads one large batch's tree evaluation is split over (1: the serving thread only).")
    max_rows: int = setting(16384, "HEADROOM_PREDICTOR_MAX_ROWS",
                            "Most candidate rows in one call (the gRPC message size follows from it).")
    max_concurrent_calls: int = setting(32, "HEADROOM_PREDICTOR_MAX_CONCURRENT_CALLS",
                                        "Calls served or queued at once; more are refused (RESOURCE_EXHAUSTED).")
    grace_seconds: float = setting(5.0, "HEADROOM_PREDICTOR_GRACE_SECONDS",
                                   "How long in-flight calls may finish after SIGTERM.")
    fetch_wait_ms: int = setting(20, "HEADROOM_PREDICTOR_FETCH_WAIT_MS",
                                 "Longest wait of one model-update fetch (bounds publish-to-serving delay).")
    models: str = setting("", "HEADROOM_PREDICTOR_MODELS",
                          "A model-update file, or a folder of *.hrmu files, to serve and reload when they change "
                          "(headroom models export writes them); set, the server tails no broker unless "
                          "HEADROOM_PREDICTOR_TAIL_WITH_MODELS.")
    models_poll_s: float = setting(0.5, "HEADROOM_PREDICTOR_MODELS_POLL_SECONDS",
                                   "How often the model files are looked at for changes.")
    tail_with_models: bool = setting(False, "HEADROOM_PREDICTOR_TAIL_WITH_MODELS",
                                     "Tail model-updates on the broker too when serving model files.")
    http_port: int = setting(-1, "HEADROOM_PREDICTOR_HTTP_PORT",
                             "Port of llm-d's prediction API over HTTP (its sidecars listen on 8001; 0: any free "
                             "port, -1: off).")
    http_pool_key: str = setting("default", "HEADROOM_PREDICTOR_HTTP_POOL",
                                 "Pool key llm-d's rows are predicted for (a row's pod_type prefill or decode "
                                 "selects <pool>-prefill or <pool>-decode).")
    http_objective: str = setting("quantile", "HEADROOM_PREDICTOR_HTTP_OBJECTIVE",
                                  "Models llm-d's API answers with: quantile (the reference's default) or mean.")
    http_prior_ms: float = setting(1.0, "HEADROOM_PREDICTOR_HTTP_PRIOR_MS",
                                   "What llm-d's API answers, labelled *_source prior and counted, for a target no "
                                   "model has been trained for yet (< 0: 503 until one is live).")
    reflection: bool = setting(False, "HEADROOM_PREDICTOR_REFLECTION",
                               "Serve gRPC reflection (lets anyone list the services; off unless asked for).")
    tls: ServerTls = nested(ServerTls, "TLS, and mTLS with a client CA, of the gRPC server and llm-d's HTTP API.")
    signing: SigningSettings = nested(SigningSettings, "The keys model updates must be signed by.")
