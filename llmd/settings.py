"""Settings of llm-d's training API server (the broker and topics come from :class:`KafkaSettings`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headroom.contract.settings import SettingsError, nested, setting
from headroom.contract.signing import SigningSettings
from headroom.contract.tls import ServerTls
from headroom.predictor.llmd_schema import MAX_ROWS
from headroom.streams.settings import RecordTimes


@dataclass(frozen=True)
class TrainingApiSettings:
    host: str = setting("127.0.0.1", "HEADROOM_LLMD_TRAINING_HOST",
                        "Address llm-d's training API binds to (loopback: the endpoint picker calls it from its pod).")
    port: int = setting(8000, "HEADROOM_LLMD_TRAINING_PORT",
                        "Port of llm-d's training API (its training sidecar listens on 8000; 0: any free port).")
    health_port: int = setting(-1, "HEADROOM_LLMD_TRAINING_HEALTH_PORT",
                               "Plain-HTTP port of /healthz, /readyz and /metrics alone, without TLS or tokens, for "
                               "probes and scrapers that reach the pod's address (0: any free port, -1: none).")
    health_host: str = setting("0.0.0.0", "HEADROOM_LLMD_TRAINING_HEALTH_HOST",
                               "Address the health port binds to (every interface: the kubelet probes the pod's IP).")
    auth_tokens_file: Path | None = setting(None, "HEADROOM_LLMD_TRAINING_AUTH_TOKENS_FILE",
                                            "Bearer tokens (one per line) every route but /healthz and /readyz "
                                            "requires; unset, none is required.")
    pool_key: str = setting("default", "HEADROOM_LLMD_POOL",
                            "Pool key the samples train (a sample's pod_type prefill or decode selects "
                            "<pool>-prefill or <pool>-decode).")
    objective: str = setting("quantile", "HEADROOM_LLMD_OBJECTIVE",
                             "Which models /model/ttft and /model/tpot describe: quantile or mean.")
    buffer_records: int = setting(100_000, "HEADROOM_LLMD_BUFFER_RECORDS",
                                  "Telemetry records held while the broker has not acknowledged them; calls that "
                                  "would go beyond are refused (429).")
    max_pending_samples: int = setting(50_000, "HEADROOM_LLMD_MAX_PENDING_SAMPLES",
                                       f"Samples admitted and not yet sent; calls that would go beyond are refused "
                                       f"(429, Retry-After). At least {MAX_ROWS}, one full call.")
    sample_transit_s: float = setting(60.0, "HEADROOM_LLMD_SAMPLE_TRANSIT_S",
                                      "Seconds a sample must have left in the worker's windows when it arrives "
                                      "(its way to the worker); an older one is refused at once, with the reason.")
    grace_seconds: float = setting(5.0, "HEADROOM_LLMD_GRACE_SECONDS",
                                   "How long calls in flight and buffered records may take after SIGTERM.")
    times: RecordTimes = nested(RecordTimes, "How old, or how far ahead, the worker takes a sample.")
    tls: ServerTls = nested(ServerTls, "TLS, and mTLS with a client CA, of the training API.")
    signing: SigningSettings = nested(SigningSettings, "The keys the listed models must be signed by.")

    def __post_init__(self) -> None:
        if self.max_pending_samples < MAX_ROWS:
            raise SettingsError(f"HEADROOM_LLMD_MAX_PENDING_SAMPLES={self.max_pending_samples}: at least {MAX_ROWS}, "
                                f"the samples one call may carry")
        if not 0 <= self.sample_transit_s < self.times.max_age_s:
            raise SettingsError(f"HEADROOM_LLMD_SAMPLE_TRANSIT_S={self.sample_transit_s:g}: from 0 to less than "
                                f"HEADROOM_WINDOW_MAX_AGE ({self.times.max_age_s:g})")
