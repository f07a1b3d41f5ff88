"""Settings of one prediction server instance (the broker and topic come from :class:`KafkaSettings`)."""

from __future__ import annotations

from dataclasses import dataclass

from headroom.contract.settings import nested, setting
from headroom.contract.signing import SigningSettings
from headroom.contract.tls import ServerTls


@dataclass(frozen=True)
class PredictorSettings:
    host: str = setting("0.0.0.0", "HEADROOM_PREDICTOR_HOST", "Address the gRPC and metrics servers bind to.")
    port: int = setting(50061, "HEADROOM_PREDICTOR_PORT", "gRPC port of the PredictionService (0: any free port).")
    metrics_port: int = setting(9461, "HEADROOM_PREDICTOR_METRICS_PORT",
                                "Prometheus metrics port (0: any free port, -1: no metrics endpoint).")
    workers: int = setting(2, "HEADROOM_PREDICTOR_WORKERS", "Threads serving gRPC calls (about one per core).")
    engine: str = setting("", "HEADROOM_PREDICTOR_ENGINE", "Tree engine: numba or numpy (empty: best available).")
    threads: int = setting(1, "HEADROOM_PREDICTOR_THREADS",
                           "Threads one large batch's tree evaluation is split over (1: the serving thread only).")
    grace_seconds: float = setting(5.0, "HEADROOM_PREDICTOR_GRACE_SECONDS",
                                   "How long in-flight calls may finish after SIGTERM.")
    fetch_wait_ms: int = setting(20, "HEADROOM_PREDICTOR_FETCH_WAIT_MS",
                                 "Longest wait of one model-update fetch (bounds publish-to-serving delay).")
    reflection: bool = setting(False, "HEADROOM_PREDICTOR_REFLECTION",
                               "Serve gRPC reflection (lets anyone list the services; off unless asked for).")
    tls: ServerTls = nested(ServerTls, "TLS, and mTLS with a client CA, of the gRPC server.")
    signing: SigningSettings = nested(SigningSettings, "The keys model updates must be signed by.")
