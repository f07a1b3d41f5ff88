"""llm-d's samples → the training API → telemetry on the real broker → the real worker → model-updates →
llm-d's prediction API; forged and unsigned updates refused by every reader; then the same models served
from exported files, signed as published, without a broker."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

import numpy as np
import pytest

from headroom.contract.model_update import RejectedUpdate, decode_update
from headroom.contract.settings import from_env
from headroom.contract.signing import SigningKey, SigningSettings, TrustedKeys
from headroom.contract.topics import REASON_HEADER
from headroom.kafka_clients import producer
from headroom.llmd.settings import TrainingApiSettings
from headroom.llmd.training_server import TrainingServer
from headroom.model_files import export_latest, model_paths
from headroom.model_topic import read_latest
from tests.keys import TEST_KEY, TRUST
from tests.llmd.http import call
from tests.predictor.models import message, train
from tests.streams.ledger import read_committed
from tests.streams.worker_process import WorkerProcess

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

MODELS = ("llama/ttft/quantile", "llama/tpot/quantile")


def true_ttft(e):
    return (20 + 0.05 * e["input_token_length"] * (1 - e["prefix_cache_score"]) + 15 * e["num_request_waiting"]
            + 200 * e["kv_cache_percentage"])


def true_tpot(e):
    return 8 + 0.3 * e["num_request_running"] + 10 * e["kv_cache_percentage"]


def states(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"kv_cache_percentage": float(rng.uniform(0, 1)), "input_token_length": int(rng.integers(100, 4000)),
             "num_request_waiting": int(min(rng.exponential(3), 20)), "num_request_running": int(rng.integers(0, 64)),
             "num_tokens_generated": 0, "prefix_cache_score": float(rng.uniform(0, 1))} for _ in range(n)]


def samples(n: int, seed: int) -> list[dict]:
    """TTFT and TPOT samples as llm-d's endpoint picker sends them, with and without timestamps."""
    rng = np.random.default_rng(seed + 100)
    out = []
    for i, state in enumerate(states(n, seed)):
        noise = float(rng.lognormal(0, 0.05))
        stamp = {"timestamp": datetime.now(UTC).isoformat()} if i % 2 else {}
        out.append({**state, **stamp, "actual_ttft_ms": true_ttft(state) * noise, "actual_tpot_ms": 0.0})
        out.append({**state, **stamp, "actual_ttft_ms": 0.0, "actual_tpot_ms": true_tpot(state) * noise,
                    "num_tokens_generated": int(rng.integers(2, 400))})
    return out


def wait_for_models(kafka, worker: WorkerProcess, timeout_s: float = 150.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        latest, _ = read_latest(kafka, TRUST)
        if all(key in latest for key in MODELS):
            return latest
        assert worker.process.poll() is None, f"worker exited:\n{worker.log()[-3000:]}"
        time.sleep(1.0)
    raise AssertionError(f"no models {MODELS} within {timeout_s} s:\n{worker.log()[-3000:]}")


def wait_ready(url: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while call(url, "/readyz")[0] != 200:
        assert time.monotonic() < deadline, f"{url} not ready within {timeout_s} s"
        time.sleep(0.1)


def publish_forgeries(kafka, version: int) -> None:
    """A newer TTFT model signed by a key no reader trusts, and an unsigned one."""
    forger = SigningKey.generate()
    client = producer(kafka, {})
    for signed in (forger.sign, lambda raw: raw):
        raw = message(train("ttft", objective="quantile", trees=2), version, pool_key="llama", target="ttft",
                      objective="quantile", key=None)
        client.produce(kafka.model_topic, key=b"llama/ttft/quantile", value=signed(raw))
    assert client.flush(30) == 0


def test_samples_train_models_that_llm_d_prediction_api_serves(pipeline_kafka, tmp_path, start_server,
                                                               trusted_keys):
    worker = WorkerProcess(pipeline_kafka, f"llmd-{uuid.uuid4().hex[:8]}", tmp_path, extra_env={
        "HEADROOM_RETRAIN_INTERVAL": "3", "HEADROOM_RETRAIN_MIN_SAMPLES": "150"}).start()
    training = TrainingServer(from_env(TrainingApiSettings, {}, host="127.0.0.1", port=0, pool_key="llama",
                                       signing=SigningSettings(trusted_keys=trusted_keys)), pipeline_kafka).start()
    try:
        intake = f"http://127.0.0.1:{training.port}"
        wait_ready(intake)
        entries = samples(1200, seed=1)
        bad = [{**entries[0], "actual_ttft_ms": 0.0},
               {**entries[0], "encoder_input_size": 1, "encoder_matched_size": 4}]
        for start in range(0, len(entries), 400):
            status, body = call(intake, "/add_training_data_bulk", {"entries": entries[start:start + 400]})
            assert status == 202 and body["dead_lettered"] == 0
        assert call(intake, "/add_training_data_bulk", {"entries": bad})[1] == \
            {"message": "Accepted 2 training samples.", "telemetry": 0, "dead_lettered": 2, "refused": [
                {"index": 0, "reason": "the sample observes neither TTFT nor TPOT (actual_ttft_ms and actual_tpot_ms "
                                       "are 0)"},
                {"index": 1, "reason": "encoder_matched_size 4 exceeds encoder_input_size 1"}]}
        wait_for_models(pipeline_kafka, worker)
        worker.stop()  # no newer versions from here on: both servers below serve the same ones
        latest, rejected = read_latest(pipeline_kafka, TRUST)
        assert rejected == [] and latest["llama/ttft/quantile"].window_stats["rows"] >= 150

        letters = read_committed(pipeline_kafka, pipeline_kafka.dlq_topic)
        assert sorted(dict(m.headers())[REASON_HEADER].decode()[:34] for m in letters) == [
            "encoder_matched_size 4 exceeds enc", "the sample observes neither TTFT n"]

        predictor = start_server(kafka=pipeline_kafka, http_port=0, http_pool_key="llama")
        served = f"http://127.0.0.1:{predictor.http_port}"
        wait_ready(served)
        deadline = time.monotonic() + 30
        while any(predictor.runtime.version(*key.split("/")) != latest[key].version for key in MODELS):
            assert time.monotonic() < deadline, "the predictor did not catch up with the newest versions"
            time.sleep(0.1)
        fresh = states(500, seed=2)
        status, body = call(served, "/predict/bulk/strict", {"requests": fresh})
        assert status == 200 and len(body["predictions"]) == 500
        for target, truth in (("ttft", true_ttft), ("tpot", true_tpot)):
            predicted = np.array([p[f"{target}_ms"] for p in body["predictions"]])
            actual = np.array([truth(row) for row in fresh])
            assert np.corrcoef(predicted, actual)[0, 1] > 0.9, target  # the models learned the pool's latency law
            assert 0.7 < np.mean(actual <= predicted), target  # a p90 bound: most rows fall below it

        deadline = time.monotonic() + 30
        while call(intake, "/model/ttft/info")[0] != 200:
            assert time.monotonic() < deadline, "the training API did not list the TTFT model"
            time.sleep(0.2)
        status, trees = call(intake, "/model/ttft/xgb/json")
        assert status == 200 and len(trees) > 10
        data = call(intake, "/data/status")[1]
        assert data["training_data"] == {"ttft_samples": 1200, "tpot_samples": 1200, "total_samples": 2400}
        assert data["telemetry"]["dead_lettered"] == 2 and data["models_trained"]["versions"] >= 2
        assert (data["telemetry"]["delivered"], data["telemetry"]["failed"], data["telemetry"]["dropped"]) == \
            (2400, 0, 0)

        publish_forgeries(pipeline_kafka, latest["llama/ttft/quantile"].version + 100)
        deadline = time.monotonic() + 30
        while call(intake, "/data/status")[1]["models_trained"]["rejected"] != {"unknown-key": 1, "unsigned": 1} \
                or (predictor.runtime.rejected["unknown-key"], predictor.runtime.rejected["unsigned"]) != (1, 1):
            assert time.monotonic() < deadline, "the forged updates were not read and refused"
            time.sleep(0.2)
        assert predictor.runtime.version("llama", "ttft", "quantile") == latest["llama/ttft/quantile"].version
        assert call(intake, "/model/ttft/info")[1]["version"] == latest["llama/ttft/quantile"].version

        folder = tmp_path / "models"
        written = export_latest(pipeline_kafka, TRUST, folder)
        assert {update.key: update.version for _, update in written} == {k: u.version for k, u in latest.items()}
        for path in model_paths(folder):  # the files carry the worker's signature: a reader of another key refuses them
            assert decode_update(path.read_bytes(), TRUST).signer == TEST_KEY.key_id
            with pytest.raises(RejectedUpdate) as refused:
                decode_update(path.read_bytes(), TrustedKeys([SigningKey.generate().public_key]))
            assert refused.value.reason == "unknown-key"
        offline = start_server(http_port=0, http_pool_key="llama", models=str(folder))
        assert offline.tailer is None
        wait_ready(f"http://127.0.0.1:{offline.http_port}")
        again = call(f"http://127.0.0.1:{offline.http_port}", "/predict/bulk/strict", {"requests": fresh})[1]
        assert [(p["ttft_ms"], p["tpot_ms"]) for p in again["predictions"]] == \
            [(p["ttft_ms"], p["tpot_ms"]) for p in body["predictions"]]
    finally:
        training.stop()
        worker.stop()
