"""Settings of llm-d's training API server (the broker and topics come from :class:`KafkaSettings`)."""

from __future__ import annotations

from dataclasses import dataclass

from headroom.contract.settings import nested, setting
from headroom.contract.signing import SigningSettings
from headroom.contract.tls import ServerTls


@dataclass(frozen=True)
class TrainingApiSettings:
    host: str = setting("0.0.0.0", "HEADROOM_LLMD_TRAINING_HOST", "Address llm-d's training API binds to.")
    port: int = setting(8000, "HEADROOM_LLMD_TRAINING_PORT",
                        "Port of llm-d's training API (its training sidecar listens on 8000; 0: any free port).")
    pool_key: str = setting("default", "HEADROOM_LLMD_POOL",
                            "Pool key the samples train (a sample's pod_type prefill or decode selects "
                            "<pool>-prefill or <pool>-decode).")
    objective: str = setting("quantile", "HEADROOM_LLMD_OBJECTIVE",
                             "Which models /model/ttft and /model/tpot describe: quantile or mean.")
    buffer_records: int = setting(100_000, "HEADROOM_LLMD_BUFFER_RECORDS",
                                  "Telemetry records held while the broker is away; beyond, samples are dropped "
                                  "and counted.")
    grace_seconds: float = setting(5.0, "HEADROOM_LLMD_GRACE_SECONDS",
                                   "How long calls in flight and buffered records may take after SIGTERM.")
    tls: ServerTls = nested(ServerTls, "TLS, and mTLS with a client CA, of the training API.")
    signing: SigningSettings = nested(SigningSettings, "The keys the listed models must be signed by.")
