"""Run ``headroom worker start`` as a real subprocess and read its Prometheus metrics."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from headroom.contract.topics import KafkaSettings
from tests.conftest import free_port
from tests.keys import write_private_key

WORKER = [sys.executable, "-c", "import sys; from headroom.cli.main import main; sys.exit(main())", "worker", "start"]


@dataclass
class WorkerProcess:
    kafka: KafkaSettings
    app_id: str
    data_dir: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    def env(self) -> dict[str, str]:
        """The worker's settings; it signs with the tests' key (tests.keys.TRUST reads its models)."""
        env = dict(os.environ)
        env.update({
            "HEADROOM_MODEL_SIGNING_KEY_FILE": str(write_private_key(self.data_dir)),
            "HEADROOM_KAFKA_BOOTSTRAP": self.kafka.bootstrap_servers,
            "HEADROOM_TOPIC_TELEMETRY": self.kafka.telemetry_topic,
            "HEADROOM_TOPIC_DLQ": self.kafka.dlq_topic,
            "HEADROOM_TOPIC_MODELS": self.kafka.model_topic,
            "HEADROOM_TELEMETRY_PARTITIONS": str(self.kafka.telemetry_partitions),
            "HEADROOM_PIPELINE_APP_ID": self.app_id,
            "HEADROOM_PIPELINE_DATA_DIR": str(self.data_dir),
            "HEADROOM_PIPELINE_METRICS_PORT": str(self.port),
            "HEADROOM_PIPELINE_LOG_LEVEL": "info",
        })
        env.update(self.extra_env)
        return env

    def start(self) -> WorkerProcess:
        log_path = self.log_path or self.data_dir / f"worker-{self.app_id}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")
        self.log_path = log_path
        self.process = subprocess.Popen(WORKER, env=self.env(), stdout=self._log, stderr=subprocess.STDOUT,
                                        cwd=Path(__file__).resolve().parents[2])
        return self

    def kill(self) -> None:
        """SIGKILL: no goodbye, no final commit, no flush."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._log.close()

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def metrics(self) -> dict[str, float]:
        """Current samples as ``{'name{labels}': value}``; empty while the endpoint is not up yet."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as response:
                text = response.read().decode()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return {}
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                samples[name] = float(value)
        return samples

    def metric(self, name: str) -> float:
        return self.metrics().get(name, 0.0)

    def wait_for(self, condition: Callable[[dict[str, float]], bool], timeout_s: float, what: str) -> dict[str, float]:
        """Poll the metrics until ``condition`` holds; fails with the worker's log tail otherwise."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited with {self.process.returncode} waiting for {what}:\n"
                                     f"{self.log()[-3000:]}")
            samples = self.metrics()
            if samples and condition(samples):
                return samples
            time.sleep(0.25)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; metrics "
                             f"{ {k: v for k, v in self.metrics().items() if k.startswith('headroom_')} }\n"
                             f"{self.log()[-3000:]}")
