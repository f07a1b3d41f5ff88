"""GIE's own endpoint picker (v1.5.0) with headroom's sidecars, as the inferencepool chart deploys them with
the drop-in values (tests/llmd/epp.py): once in the chart's default configuration (``streamingMode: false``,
responses not streamed), once with ``streamingMode: true`` and streamed responses. Envoy is played as it runs
in front of the picker (benchmarks/envoy.py), each request sent to the endpoint picked; headroom's worker
learns from the samples, on the real broker, and the prediction sidecar serves what it publishes.

From a cold start: the Pod is Ready without traffic (the chart's probes); after warm-up (a model trained from
the picker's own samples) at least 99% of the picker's prediction calls succeed by its own metrics; its
sidecar client logs no error; every sample it sent is in the worker's windows (or refused, with a reason,
to the picker). ``HEADROOM_TEST_EPP_SECONDS`` runs the part after warm-up that long instead of
``AFTER_WARM_UP`` requests (the 5-minute run of docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import uuid

import pytest

from headroom.benchmarks.envoy import Envoy, Exchange
from tests.conftest import free_port
from tests.llmd.epp import (
    EppPod,
    answers,
    create_pool,
    errors,
    install_crds,
    render,
    rendered,
    scrape,
    serving,
    total,
    wait_until,
)
from tests.llmd.http import call
from tests.streams.worker_process import WorkerProcess

pytestmark = [pytest.mark.kube, pytest.mark.kafka, pytest.mark.e2e, pytest.mark.timeout(900)]

POOL = "llama-3-8b"  # the drop-in values' pool key
AFTER_WARM_UP = 100  # requests sent once the models are trained
CONCURRENCY = 6
WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches".split()


@pytest.fixture(scope="module")
def crds(kube_api):
    install_crds(kube_api)


def request_body(rng: random.Random, streaming: bool) -> dict:
    prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 400)))
    return {"model": "sim-llama-3-8b", "prompt": prompt, "max_tokens": rng.randint(4, 24), "stream": streaming}


async def drive(port: int, count: int | None, seconds: float | None, streaming: bool, seed: int) -> list[Exchange]:
    """``count`` requests (or as many as ``seconds`` allow), ``CONCURRENCY`` at a time, through the picker."""
    rng, sent, done = random.Random(seed), 0, []
    end = time.monotonic() + (seconds or 3600)

    async def one_at_a_time(envoy: Envoy) -> None:
        nonlocal sent
        while (count is None or sent < count) and time.monotonic() < end:
            sent += 1
            done.append(await envoy.send(request_body(rng, streaming)))

    async with Envoy(f"127.0.0.1:{port}") as envoy:
        await asyncio.gather(*(one_at_a_time(envoy) for _ in range(CONCURRENCY)))
    return done


@pytest.mark.parametrize("streaming", [False, True], ids=["chart-default", "streaming"])
def test_the_endpoint_picker_runs_on_headroom_sidecars(kube_api, helm, crds, pipeline_kafka, trusted_keys, tmp_path,
                                                       streaming):
    mode = "streaming" if streaming else "default"
    namespace, addresses = f"epp-{mode}", [f"127.0.0.{20 + 10 * streaming + i}" for i in range(1, 4)]
    ports = {name: free_port() for name in ("training", "health", "predict", "sim")}
    kafka_env = {"HEADROOM_KAFKA_BOOTSTRAP": pipeline_kafka.bootstrap_servers,
                 "HEADROOM_TOPIC_TELEMETRY": pipeline_kafka.telemetry_topic,
                 "HEADROOM_TOPIC_DLQ": pipeline_kafka.dlq_topic,
                 "HEADROOM_TOPIC_MODELS": pipeline_kafka.model_topic,
                 "HEADROOM_TELEMETRY_PARTITIONS": str(pipeline_kafka.telemetry_partitions),
                 "HEADROOM_MODEL_TRUSTED_KEYS": trusted_keys}
    objects = render(helm, "pool", namespace, {
        "inferencePool": {"modelServers": {"matchLabels": {"app": f"sim-{mode}"}},
                          "targetPorts": [{"number": ports["sim"]}]},
        "inferenceExtension": {"monitoring": {"prometheus": {"auth": {"enabled": False}}}, "latencyPredictor": {
            "trainingServer": {"port": ports["training"], "readinessProbe": {"httpGet": {"port": ports["health"]}},
                               "livenessProbe": {"httpGet": {"port": ports["health"]}},
                               "config": {**kafka_env, "HEADROOM_LLMD_TRAINING_PORT": str(ports["training"]),
                                          "HEADROOM_LLMD_TRAINING_HEALTH_PORT": str(ports["health"]),
                                          "HEADROOM_LLMD_TRAINING_HEALTH_HOST": "127.0.0.1"}},
            "predictionServers": {"startPort": ports["predict"],  # the chart passes --host 0.0.0.0; loopback here
                                  "config": {**kafka_env, "HEADROOM_PREDICTOR_HOST": "127.0.0.1"}}}}}, tmp_path)
    create_pool(kube_api, namespace, rendered(objects, "InferencePool"), addresses)
    worker = WorkerProcess(pipeline_kafka, f"epp-{uuid.uuid4().hex[:8]}", tmp_path / "worker", extra_env={
        "HEADROOM_RETRAIN_INTERVAL": "2", "HEADROOM_RETRAIN_MIN_SAMPLES": "100", "HEADROOM_TRAIN_TREES": "60"})
    pod = EppPod(objects, kube_api, namespace, tmp_path, addresses, ports["sim"], streaming=streaming)
    training, predictor = f"http://127.0.0.1:{ports['training']}", f"http://127.0.0.1:{ports['predict']}"
    summary: dict = {"mode": mode}
    try:
        worker.start()
        pod.start()
        # A fresh install, no traffic: every container's readiness probe, as the chart renders it, answers.
        probes = [f"http://127.0.0.1:{c['readinessProbe']['httpGet']['port']}{c['readinessProbe']['httpGet']['path']}"
                  for c in rendered(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
                  if "httpGet" in c.get("readinessProbe", {})]
        assert len(probes) == 2  # the training sidecar's health port, the prediction sidecar
        wait_until(lambda: all(answers(p) for p in probes) and serving(pod.ports["health"]), 90, "the Pod's readiness",
                   pod.processes)
        summary["ready_s"] = round(time.monotonic() - pod.started_at, 1)
        before = call(predictor, "/status")[1]
        assert before["answered_with_prior"] == ["ttft", "tpot"] and before["models_exist"] == {
            "ttft_model": False, "tpot_model": False}

        # Warm-up: traffic until the sidecar answers from models trained on the picker's own samples.
        trained = ["tpot", "ttft"] if streaming else ["ttft"]
        exchanges, deadline = [], time.monotonic() + 240
        while any(t in call(predictor, "/status")[1]["answered_with_prior"] for t in trained):
            assert time.monotonic() < deadline, f"no models within 240 s:\n{worker.log()[-3000:]}\n{pod.logs()}"
            exchanges += asyncio.run(drive(pod.ports["grpc"], 40, None, streaming, seed=len(exchanges)))
        summary["warm_up_requests"] = len(exchanges)
        epp_metrics, served_before = pod_metrics(pod), scrape(f"{predictor}/metrics")

        # After warm-up: the picker's prediction calls, by its own metrics.
        seconds = float(os.environ.get("HEADROOM_TEST_EPP_SECONDS", 0)) or None
        after = asyncio.run(drive(pod.ports["grpc"], None if seconds else AFTER_WARM_UP, seconds, streaming, seed=7))
        exchanges += after
        epp_after, served_after = pod_metrics(pod), scrape(f"{predictor}/metrics")
        requests = epp_after["requests"] - epp_metrics["requests"]
        predicted = epp_after["predicted"] - epp_metrics["predicted"]
        summary.update(after_requests=len(after), epp_requests=requests, epp_predictions_ok=predicted,
                       success=predicted / max(requests, 1))
        assert requests == len(after) and predicted / requests >= 0.99, summary
        assert all(x.status == 200 and x.refused is None for x in exchanges), [x for x in exchanges if x.status != 200]
        assert {x.endpoint.split(":")[0] for x in after} == set(addresses)  # the picker spread them over the pool
        assert {x.endpoint.split(":")[1] for x in after} == {str(ports["sim"])}
        assert all(x.body.startswith(b"data: ") == streaming for x in after)  # SSE streams, or one JSON answer

        # Every prediction the sidecar served is counted; after warm-up, none of a trained target by the prior.
        calls = total(served_after, "headroom_predictor_http_requests_total", route="/predict/bulk/strict",
                      status="200") - total(served_before, "headroom_predictor_http_requests_total",
                                            route="/predict/bulk/strict", status="200")
        rows = total(served_after, "headroom_predictor_candidates_total") - total(
            served_before, "headroom_predictor_candidates_total")
        assert 0 < calls <= predicted and rows >= predicted  # the picker coalesces callers into fewer calls
        for target in ("ttft", "tpot"):
            priors = total(served_after, "headroom_predictor_http_prior_predictions_total", target=target) - total(
                served_before, "headroom_predictor_http_prior_predictions_total", target=target)
            assert priors == (0 if target in trained else rows), target
        summary["predictor_calls"], summary["predictor_rows"] = calls, rows

        # Every training sample the picker sent is in the windows, or was refused with a reason it saw. It sends
        # one when it records a latency in its metrics: a TTFT (a non-streamed response's E2E) for every request,
        # and, streaming, a TPOT for every request that has one.
        observed = scrape(f"http://127.0.0.1:{pod.ports['metrics']}/metrics")
        ttft_samples = total(observed, "inference_objective_request_ttft_seconds_count")
        tpot_samples = total(observed, "inference_objective_request_tpot_seconds_count")
        samples = ttft_samples + tpot_samples
        assert ttft_samples >= 0.99 * len(exchanges) and (tpot_samples >= 0.99 * len(exchanges) if streaming else
                                                          tpot_samples == 0), (ttft_samples, tpot_samples)
        wait_until(lambda: call(training, "/data/status")[1]["telemetry"]["delivered"] >= samples, 60,
                   f"the delivery of {samples} samples: {call(training, '/data/status')[1]}", pod.processes)
        status = call(training, "/data/status")[1]
        assert (status["training_data"]["ttft_samples"], status["training_data"]["tpot_samples"]) == \
            (ttft_samples, tpot_samples), status
        sent = status["telemetry"]
        assert (sent["records_sent"], sent["delivered"], sent["dead_lettered"], sent["refused"], sent["failed"],
                sent["dropped"], sent["calls_refused_busy"]) == (samples, samples, 0, {}, 0, 0, 0), sent
        worker.wait_for(lambda m: m.get("headroom_telemetry_ingested_total", 0) >= samples, 60, "every sample")
        ingested = worker.metrics()
        assert (ingested["headroom_telemetry_ingested_total"], ingested.get("headroom_telemetry_dead_letters_total"),
                ingested.get("headroom_telemetry_unadmitted_total")) == (samples, 0.0, 0.0)
        summary["samples"] = samples

        # The picker's sidecar client logged no error but for its first two calls: it makes them as it starts,
        # a fraction of a second before any sidecar of its Pod can listen, and makes them again a minute later.
        logged = errors(pod.process("epp").text())
        failures = [e for e in logged if e.get("logger", "").endswith("latency-predictor-client")]
        at_start = [e for e in failures if e["msg"].startswith("failed to get initial")
                    and "connection refused" in e.get("error", "")]
        summary.update(client_errors=len(failures), client_errors_at_start=len(at_start),
                       prediction_calls_failed=sum(e["msg"] == "Bulk prediction failed" for e in logged))
        assert failures == at_start and len(at_start) <= 2, failures[:5]
    finally:
        print(json.dumps(summary))
        pod.stop()
        worker.stop()


def pod_metrics(pod: EppPod) -> dict[str, float]:
    """The picker's requests and its successful bulk prediction calls (it times only those), from its metrics."""
    samples = scrape(f"http://127.0.0.1:{pod.ports['metrics']}/metrics")
    return {"requests": total(samples, "inference_objective_request_total"),
            "predicted": total(samples, "inference_objective_request_ttft_prediction_duration_seconds_count")}
