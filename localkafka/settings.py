"""Settings of the local broker."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headroom.contract.settings import setting
from headroom.localkafka import infra

INFRA_DIR = Path(infra.__file__).resolve().parent  # infra/kafka/ of the source tree, package data when installed


@dataclass(frozen=True)
class BrokerSettings:
    """Where the local broker listens, keeps its state and finds its jars."""

    port: int = setting(9092, "HEADROOM_KAFKA_PORT", "Client port on 127.0.0.1.")
    controller_port: int = setting(9093, "HEADROOM_KAFKA_CONTROLLER_PORT", "KRaft controller port on 127.0.0.1.")
    secure: bool = setting(False, "HEADROOM_KAFKA_SECURE", "TLS, authenticated users and ACLs (the port takes "
                           "SASL_SSL; see localkafka.security).")
    ssl_port: int = setting(9094, "HEADROOM_KAFKA_SSL_PORT", "Port of the certificate-authenticated TLS listener "
                            "on 127.0.0.1 (secure mode).")
    state_dir: Path = setting(Path(".headroom"), "HEADROOM_STATE_DIR", "Folder for broker data, log and pid file.")
    jar_cache: Path = setting(Path.home() / ".cache" / "headroom" / "kafka", "HEADROOM_KAFKA_JAR_CACHE",
                              "Where the broker jars fetched from Maven Central are kept.")
    heap: str = setting("768m", "HEADROOM_KAFKA_HEAP", "Maximum JVM heap of the broker.")
    start_timeout_s: float = setting(90.0, "HEADROOM_KAFKA_START_TIMEOUT", "Seconds to wait for the broker.")
    infra_dir: Path = setting(INFRA_DIR, "HEADROOM_KAFKA_INFRA", "Folder with pom.xml, the broker properties, log4j2.yaml.")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def home(self) -> Path:
        return self.state_dir / "kafka"
