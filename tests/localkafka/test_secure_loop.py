"""The whole loop over SASL_SSL, each component as its own principal: the router's telemetry producer (as
``headroom-router``) feeds the learning worker (a real process, as ``headroom-worker``), which trains and
publishes signed models; the prediction server (as ``headroom-predictor``) and the router's embedded
predictor (as ``headroom-router``) tail and serve them, and ``headroom models list`` (as
``headroom-predictor``) shows who signed them."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from headroom.cli.main import main
from headroom.contract.settings import from_env
from headroom.contract.signing import SigningSettings
from headroom.predictor.server import PredictorServer
from headroom.router.app.server import RouterServer
from tests.keys import TEST_KEY, write_public_key
from tests.predictor.conftest import local_settings
from tests.predictor.test_service import request, stub_of
from tests.router.routercases import router_config
from tests.streams.worker_process import WorkerProcess
from tests.trainer.synthetic import synthetic_records

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]


def test_learn_publish_serve_over_sasl_ssl(secure_kafka, tmp_path, monkeypatch, capsys):
    trusted = {"HEADROOM_MODEL_TRUSTED_KEYS": str(write_public_key(tmp_path / "trusted"))}
    worker = WorkerProcess(secure_kafka.client("headroom-worker"), secure_kafka.worker_app_id, tmp_path / "worker", extra_env={
        **secure_kafka.environ("headroom-worker"), "HEADROOM_RETRAIN_INTERVAL": "3", "HEADROOM_RETRAIN_MIN_SAMPLES": "150"})
    predictor = PredictorServer(local_settings(signing=from_env(SigningSettings, trusted)),
                                secure_kafka.client("headroom-predictor"))
    router = RouterServer(router_config([], environ=trusted, telemetry=True, predictor="embedded"),
                          secure_kafka.client("headroom-router"))
    worker.start()
    predictor.start()

    async def route() -> None:
        await router.start()
        try:
            for record in synthetic_records(1000, seed=31, stream_fraction=1.0, start_ts=time.time(), rate_per_s=100.0):
                router.telemetry.send(record)
            deadline = time.monotonic() + 150
            while not (predictor.ready and router.service.predictor.runtime.ready):
                assert time.monotonic() < deadline, f"nothing served within 150 s:\n{worker.log()[-3000:]}"
                assert worker.process.poll() is None, f"the worker exited:\n{worker.log()[-3000:]}"
                await asyncio.sleep(0.5)
        finally:
            await router.stop()

    try:
        asyncio.run(asyncio.wait_for(route(), 200))
        assert router.telemetry.counts.delivered == 1000 and router.telemetry.counts.failed == 0
        served = {m.key: m.signer for m in predictor.runtime.live()}
        assert served.get("pool-a/ttft/mean") == TEST_KEY.key_id, served
        assert {m.key: m.signer for m in router.service.predictor.runtime.live()}.get("pool-a/ttft/mean") \
            == TEST_KEY.key_id
        untrusted = {"unsigned", "unknown-key", "bad-signature"}  # (other tests' models share the session's topic)
        assert not untrusted & set(predictor.runtime.rejected)
        assert not untrusted & set(router.service.predictor.runtime.rejected)
        assert 'headroom_router_model_updates_total{outcome="applied",reason=""}' in router.metrics.exposition().decode()
        channel, stub = stub_of(predictor)
        with channel:
            assert stub.Predict(request(), timeout=5).predictions
        worker.wait_for(lambda m: m.get("headroom_telemetry_ingested_total", 0) >= 1000, 60, "every record")
    except grpc.RpcError as err:
        raise AssertionError(f"the predictor did not answer: {err}") from err
    finally:
        predictor.stop(grace=0.5)
        worker.stop()
    for name, value in {**secure_kafka.environ("headroom-predictor"), **trusted}.items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    assert main(["models", "list"]) == 0
    listing = capsys.readouterr().out
    assert "pool-a/ttft/mean" in listing and f"key {TEST_KEY.key_id}" in listing
