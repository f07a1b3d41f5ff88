"""Convergence of N prediction servers on a new version: ``headroom bench predictor converge``.

N ``headroom predictor serve`` processes (one port on 127.0.0.1, .2, ...; as pods behind a Service) tail a
fresh compacted model topic, trusting the run's key. Reference-size TTFT models (200 trees, depth 6) are then published one after
another; for each, every instance is asked (gRPC ``Predict``, one row, every ``poll_s``) until it answers
with the new version. Per version: each instance's delay from ``produce`` to serving it, and the
convergence time — until the last of the N serves it. The instances share the machine's cores, so each
verifies every update (≈ 100 ms of CPU) while the others do the same.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import grpc
import numpy as np

from headroom.benchmarks.predictor import BENCH_KEY, BENCH_TRUST, candidates, percentiles, reference_messages
from headroom.certificates import write_signing_key
from headroom.contract.model_update import decode_update
from headroom.contract.topics import KafkaSettings, TopicSpec
from headroom.demo.processes import Supervisor
from headroom.kafka_topics import ensure_topics
from headroom.ports import free_port
from headroom.predictor.proto import prediction_pb2, prediction_pb2_grpc
from headroom.predictor.service import FLOAT32_LE
from headroom.trainer.publish import ModelPublisher

Stub = prediction_pb2_grpc.PredictionServiceStub


def served_version(stub: Stub, pool_key: str, row: bytes) -> int | None:
    request = prediction_pb2.PredictRequest(pool_key=pool_key, n_features=len(row) // 4, features_f32le=row)
    try:
        response = stub.Predict(request, timeout=1.0)
    except grpc.RpcError:
        return None
    return next((p.version for p in response.predictions if p.target == "ttft" and p.objective == "mean"), None)


def serves(stub: Stub, pool_key: str, row: bytes, version: int) -> bool:
    return served_version(stub, pool_key, row) == version


def time_to_serve(stub: Stub, pool_key: str, row: bytes, version: int, started: float, poll_s: float) -> float:
    """Seconds from ``started`` until the instance serves ``version``."""
    while served_version(stub, pool_key, row) != version:
        if time.perf_counter() - started > 30:
            raise TimeoutError(f"an instance did not serve v{version} within 30 s")
        time.sleep(poll_s)
    return time.perf_counter() - started


def bench_convergence(kafka: KafkaSettings, instances: int, versions: int = 20, poll_s: float = 0.002,
                      log_dir: Path | None = None) -> dict[str, object]:
    topic = f"bench-converge-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, [TopicSpec(topic, 1, {"cleanup.policy": "compact"})])
    kafka = dataclasses.replace(kafka, model_topic=topic)
    template = decode_update(reference_messages()[0][0], BENCH_TRUST)
    publisher = ModelPublisher(kafka, BENCH_KEY)
    publisher.publish(template)  # version 1: the instances become ready with it
    hosts = [f"127.0.0.{i + 1}" for i in range(instances)]
    port = free_port()
    logs = log_dir or Path(f"/tmp/headroom-converge-{os.getpid()}-{topic}")
    logs.mkdir(parents=True, exist_ok=True)
    _, trusted = write_signing_key(BENCH_KEY, logs, "bench-signing")
    supervisor = Supervisor(logs, env={"HEADROOM_KAFKA_BOOTSTRAP": kafka.bootstrap_servers, "HEADROOM_TOPIC_MODELS": topic,
                                 "HEADROOM_MODEL_TRUSTED_KEYS": str(trusted),
                                 "HEADROOM_PREDICTOR_PORT": str(port), "HEADROOM_PREDICTOR_METRICS_PORT": "-1"})
    row = candidates(1, seed=3).astype(FLOAT32_LE).tobytes()
    channels = [grpc.insecure_channel(f"{host}:{port}") for host in hosts]
    stubs = [prediction_pb2_grpc.PredictionServiceStub(c) for c in channels]
    delays: list[list[float]] = [[] for _ in hosts]
    converged: list[float] = []
    try:
        for host, stub in zip(hosts, stubs):
            supervisor.env["HEADROOM_PREDICTOR_HOST"] = host
            supervisor.start(f"predictor-{host}", ["predictor", "serve"],
                             partial(serves, stub, template.pool_key, row, 1))
        with ThreadPoolExecutor(instances) as watchers:
            for version in range(2, versions + 2):
                update = dataclasses.replace(template, version=version, created_at=time.time())
                started = time.perf_counter()
                publisher.publish(update)
                seen = list(watchers.map(lambda stub, v=version, t=started: time_to_serve(
                    stub, template.pool_key, row, v, t, poll_s), stubs))
                for i, seconds in enumerate(seen):
                    delays[i].append(seconds)
                converged.append(max(seen))
                time.sleep(0.2)
    finally:
        for channel in channels:
            channel.close()
        supervisor.stop()
    every = [d for per_instance in delays for d in per_instance]
    return {"instances": instances, "versions": versions, "model_bytes": len(template.model),
            "instance": percentiles(every), "converged": percentiles(converged),
            "converged_max_ms": 1000 * float(np.max(converged)), "load_average": os.getloadavg()[0]}

