"""Restart times of the worker and the predictor after ``kill -9``: how long until each does its work again.

One broker (started here, loopback, temporary folder). The model topic holds ``--versions`` versions of
six reference-sized models (200 trees, depth 6: TTFT, TPOT and E2E, mean and p90), as a topic does
between compactions. Telemetry flows all the time (``--rate`` records per second).

- predictor: ``headroom predictor serve`` is killed and started again; timed from the start of the new
  process to its gRPC health saying SERVING (the replay verifies the newest version of each
  model).
- worker: ``headroom worker start`` is killed and started again; timed from the kill to the new process
  processing records (its ``headroom_telemetry_ingested_total`` moving), as a dynamic group member (the
  restarted worker waits for the group to give up on the killed one: the session timeout) and as a
  static member (``HEADROOM_PIPELINE_INSTANCE_ID``: it takes its partitions back at once).

``--old-python`` runs the same commands with another installation of headroom (e.g. an older commit in
its own virtualenv), interleaved with this one, for a before/after ratio in one run. Usage:
``python -m headroom.benchmarks.dev.restarts --rounds 3 [--old-python /path/to/old/.venv/bin/python]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from headroom import kafka_clients, kafka_topics
from headroom.contract.model_update import model_key
from headroom.contract.settings import from_env
from headroom.contract.telemetry import encode, partition_key
from headroom.contract.topics import MODEL_MESSAGE_MAX_BYTES, KafkaSettings
from headroom.demo.scrape import scrape, total
from headroom.localkafka import broker
from headroom.localkafka.settings import BrokerSettings
from headroom.ports import free_port
from tests.keys import write_private_key, write_public_key
from tests.predictor.models import message, train
from tests.trainer.synthetic import synthetic_records

MODELS = [(target, objective) for target in ("ttft", "tpot", "e2e") for objective in ("mean", "quantile")]


def publish_models(kafka: KafkaSettings, versions: int) -> None:
    producer = kafka_clients.producer(kafka, {"message.max.bytes": MODEL_MESSAGE_MAX_BYTES})
    boosters = {m: train(m[0], m[1], trees=200, depth=6, rows=4000) for m in MODELS}
    for version in range(1, versions + 1):
        for (target, objective), booster in boosters.items():
            producer.produce(kafka.model_topic, key=model_key("pool-a", target, objective).encode(),
                             value=message(booster, version, target=target, objective=objective))
        producer.flush(60)


def telemetry_stream(kafka: KafkaSettings, rate: float, stop: threading.Event) -> None:
    producer = kafka_clients.producer(kafka, {"linger.ms": 20})
    seed = 0
    while not stop.is_set():
        seed += 1
        for record in synthetic_records(int(rate), seed=seed, start_ts=time.time(), rate_per_s=rate):
            producer.produce(kafka.telemetry_topic, key=partition_key(record), value=encode(record))
        producer.poll(0)
        stop.wait(1.0)
    producer.flush(10)


class Process:
    def __init__(self, python: str, args: list[str], env: dict[str, str], log: Path):
        self.log = open(log, "ab")
        # started in the log's folder: ``python -m`` puts the working directory first on the path, and an
        # installation must import its own headroom, not the checkout's
        self.popen = subprocess.Popen([python, "-m", "headroom.cli.main", *args], env={**os.environ, **env},
                                      stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                      cwd=log.parent)

    def kill(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)
        self.log.close()


def wait_until(condition: Callable[[], object], limit_s: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        try:
            if condition():
                return time.monotonic() - started
        except (OSError, ValueError, grpc.RpcError):
            pass
        time.sleep(0.1)
    return None


def serving(port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=0.5)
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def processed(port: int) -> float:
    samples = scrape(f"http://127.0.0.1:{port}/metrics", timeout_s=1.0)
    return total(samples, "headroom_telemetry_ingested_total") + total(samples, "headroom_telemetry_dead_letters_total")


def predictor_restart(python: str, env: dict[str, str], folder: Path, name: str, rounds: int) -> list[float]:
    port = free_port()
    args = ["predictor", "serve", "--port", str(port), "--metrics-port", "-1"]
    first = Process(python, args, env, folder / f"{name}.log")
    try:
        assert wait_until(lambda: serving(port), 300) is not None, f"{name} never served"
    finally:
        first.kill()
    times = []
    for _ in range(rounds):
        process = Process(python, args, env, folder / f"{name}.log")
        try:
            seconds = wait_until(lambda: serving(port), 300)
        finally:
            process.kill()
        times.append(float("inf") if seconds is None else seconds)
    return times


def worker_restart(python: str, env: dict[str, str], folder: Path, name: str, rounds: int) -> list[float]:
    port = free_port()
    env = {**env, "HEADROOM_PIPELINE_APP_ID": f"restarts-{name}-{time.time_ns()}",
           "HEADROOM_PIPELINE_METRICS_PORT": str(port), "HEADROOM_PIPELINE_DATA_DIR": str(folder / name),
           "HEADROOM_RETRAIN_MIN_SAMPLES": str(10**9)}
    process = Process(python, ["worker", "start"], env, folder / f"{name}.log")
    times = []
    try:
        assert wait_until(lambda: processed(port) > 0, 300) is not None, f"{name} never processed a record"
        for _ in range(rounds):
            killed = time.monotonic()
            process.kill()
            process = Process(python, ["worker", "start"], env, folder / f"{name}.log")
            recovered = wait_until(lambda: processed(port) > 0, 300) is not None
            times.append(time.monotonic() - killed if recovered else float("inf"))
    finally:
        process.kill()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--versions", type=int, default=10, help="versions of each model on the topic")
    parser.add_argument("--rate", type=float, default=50.0, help="telemetry records per second")
    parser.add_argument("--old-python", help="python of another headroom installation, measured alongside")
    args = parser.parse_args()
    pythons = {"this": sys.executable, **({"old": args.old_python} if args.old_python else {})}
    with tempfile.TemporaryDirectory(prefix="headroom-restarts-") as name:
        folder = Path(name)
        settings = from_env(BrokerSettings, {}, port=free_port(), controller_port=free_port(), state_dir=folder / "kafka")
        broker.up(settings)
        stop = threading.Event()
        try:
            kafka = from_env(KafkaSettings, {}, bootstrap_servers=settings.bootstrap)
            kafka_topics.ensure_topics(kafka)
            publish_models(kafka, args.versions)
            streamer = threading.Thread(target=telemetry_stream, args=(kafka, args.rate, stop), daemon=True)
            streamer.start()
            env = {"HEADROOM_KAFKA_BOOTSTRAP": kafka.bootstrap_servers, "HEADROOM_STATE_DIR": str(folder),
                   "HEADROOM_MODEL_SIGNING_KEY_FILE": str(write_private_key(folder)),  # the models' key (TEST_KEY)
                   "HEADROOM_MODEL_TRUSTED_KEYS": str(write_public_key(folder / "trusted"))}
            variants: list[tuple[str, Callable[[], list[float]]]] = [
                (f"predictor, {label}", partial(predictor_restart, python, env, folder, f"predictor-{label}", 1))
                for label, python in pythons.items()]
            variants += [(f"worker, {label}", partial(worker_restart, python, env, folder, f"worker-{label}", 1))
                         for label, python in pythons.items()]
            variants.append(("worker, this, static member", partial(
                worker_restart, sys.executable, {**env, "HEADROOM_PIPELINE_INSTANCE_ID": "w0"}, folder,
                "worker-static", 1)))
            results: dict[str, list[float]] = {}
            for _ in range(args.rounds):  # interleaved: one restart of each variant at a time
                for key, measure in variants:
                    results.setdefault(key, []).extend(measure())
        finally:
            stop.set()
            broker.down(settings)
    print(json.dumps({key: {"seconds": [round(t, 1) for t in times], "median": round(statistics.median(times), 1)}
                      for key, times in results.items()}, indent=2))


if __name__ == "__main__":
    main()
