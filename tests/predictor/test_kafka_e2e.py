import dataclasses
import time

import grpc
import numpy as np
import pytest
from confluent_kafka import Producer

from headroom.cli.main import main
from headroom.contract.model_update import decode_update, model_key
from headroom.contract.topics import MODEL_MESSAGE_MAX_BYTES
from headroom.model_files import model_paths
from headroom.predictor.proto import prediction_pb2, prediction_pb2_grpc
from tests.keys import TEST_KEY, TRUST
from tests.predictor.models import candidate_rows, message, train

pytestmark = [pytest.mark.kafka, pytest.mark.e2e]
ROWS = candidate_rows(40, seed=5)


def publish(kafka, topic, *messages):
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "message.max.bytes": MODEL_MESSAGE_MAX_BYTES})
    for key, value in messages:
        producer.produce(topic, key=key.encode(), value=value)
    assert producer.flush(10) == 0


def served(stub):
    request = prediction_pb2.PredictRequest(pool_key="pool-a", n_features=ROWS.shape[1],
                                            features_f32le=ROWS.astype("<f4").tobytes())
    response = stub.Predict(request, timeout=5)
    return {(p.target, p.objective): (p.version, np.frombuffer(p.values_f32le, "<f4")) for p in response.predictions}


def test_a_fresh_instance_replays_the_topic_then_follows_new_versions(kafka, fresh_topic, start_server):
    topic = fresh_topic("model-updates", config={"cleanup.policy": "compact"})
    settings = dataclasses.replace(kafka, model_topic=topic)
    ttft_key, tpot_key = model_key("pool-a", "ttft", "mean"), model_key("pool-a", "tpot", "mean")
    old, newest, tpot, next_version = train(seed=1), train(seed=2), train("tpot", seed=3), train(seed=4, depth=5)
    publish(settings, topic, (ttft_key, message(old, 1)), (ttft_key, b"corrupt"), (ttft_key, message(newest, 2)),
            (tpot_key, message(tpot, 7, target="tpot")), (ttft_key, message(old, 1)))

    server = start_server(kafka=settings)
    assert server.tailer.wait_ready(30)
    assert server.runtime.rejected == {"unsigned": 1, "replayed": 1}  # b"corrupt", then version 1 after 2
    replayed = {(outcome, reason): server.metrics.registry.get_sample_value(
        "headroom_predictor_replayed_updates_total", {"outcome": outcome, "reason": reason})
        for outcome, reason in (("applied", ""), ("stale", ""), ("rejected", "unsigned"), ("rejected", "replayed"))}
    assert replayed == {("applied", ""): 2, ("stale", ""): 1, ("rejected", "unsigned"): 1, ("rejected", "replayed"): 1}
    channel = grpc.insecure_channel(server.address)
    with channel:
        stub = prediction_pb2_grpc.PredictionServiceStub(channel)
        first = served(stub)
        assert first["ttft", "mean"][0] == 2 and first["tpot", "mean"][0] == 7
        np.testing.assert_allclose(first["ttft", "mean"][1], newest.inplace_predict(ROWS), rtol=1e-6)
        np.testing.assert_allclose(first["tpot", "mean"][1], tpot.inplace_predict(ROWS), rtol=1e-6)

        publish(settings, topic, (ttft_key, message(next_version, 3)))
        deadline = time.monotonic() + 20
        while served(stub)["ttft", "mean"][0] != 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        latest = served(stub)
        assert latest["ttft", "mean"][0] == 3
        np.testing.assert_allclose(latest["ttft", "mean"][1], next_version.inplace_predict(ROWS), rtol=1e-6)
        assert server.metrics.update_delay.collect()[0].samples  # publish-to-serving delay is measured


def test_two_instances_side_by_side_serve_the_same_versions(kafka, fresh_topic, start_server):
    topic = fresh_topic("model-updates", config={"cleanup.policy": "compact"})
    settings = dataclasses.replace(kafka, model_topic=topic)
    booster = train(seed=8)
    publish(settings, topic, (model_key("pool-a", "ttft", "mean"), message(booster, 4)))
    servers = [start_server(kafka=settings) for _ in range(2)]
    assert servers[0].port != servers[1].port
    for server in servers:
        assert server.tailer.wait_ready(30)
        with grpc.insecure_channel(server.address) as channel:
            version, values = served(prediction_pb2_grpc.PredictionServiceStub(channel))["ttft", "mean"]
        assert version == 4
        np.testing.assert_allclose(values, booster.inplace_predict(ROWS), rtol=1e-6)


def test_an_empty_topic_is_ready_but_unavailable_until_the_first_model(kafka, fresh_topic, start_server):
    topic = fresh_topic("model-updates", config={"cleanup.policy": "compact"})
    settings = dataclasses.replace(kafka, model_topic=topic)
    server = start_server(kafka=settings)
    assert server.tailer.wait_ready(30)
    key = model_key("pool-a", "ttft", "mean")
    with grpc.insecure_channel(server.address) as channel:
        stub = prediction_pb2_grpc.PredictionServiceStub(channel)
        with pytest.raises(grpc.RpcError) as failure:
            served(stub)
        assert failure.value.code() == grpc.StatusCode.UNAVAILABLE
        assert not server.ready
        publish(settings, topic, (key, None), (key, message(train(seed=9), 1)))
        deadline = time.monotonic() + 20
        while server.runtime.version("pool-a", "ttft", "mean") != 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert served(stub)["ttft", "mean"][0] == 1
    assert server.tailer.consumed == 2


def test_models_export_writes_signed_files_a_server_reads_beside_the_topic(kafka, fresh_topic, start_server, tmp_path,
                                                                          trusted_keys, monkeypatch, capsys):
    topic = fresh_topic("model-updates", config={"cleanup.policy": "compact"})
    settings = dataclasses.replace(kafka, model_topic=topic)
    ttft_key = model_key("pool-a", "ttft", "mean")
    publish(settings, topic, (ttft_key, message(train(seed=1), 1)), (ttft_key, message(train(seed=2), 2)),
            (ttft_key, message(train(seed=3), 9, key=None)))  # unsigned: never exported
    monkeypatch.setenv("HEADROOM_MODEL_TRUSTED_KEYS", trusted_keys)
    monkeypatch.delenv("HEADROOM_MODEL_ALLOW_UNSIGNED", raising=False)
    monkeypatch.setenv("HEADROOM_TOPIC_MODELS", topic)
    folder = tmp_path / "models"
    assert main(["models", "export", str(folder), "--bootstrap", kafka.bootstrap_servers, "--timeout", "30"]) == 0
    assert "pool-a/ttft/mean v2 ->" in capsys.readouterr().out
    [path] = model_paths(folder)
    assert (decode_update(path.read_bytes(), TRUST).version, decode_update(path.read_bytes(), TRUST).signer) == \
        (2, TEST_KEY.key_id)

    server = start_server(kafka=settings, models=str(folder), tail_with_models=True, models_poll_s=0.05)
    assert server.tailer is not None and server.files is not None
    assert server.tailer.wait_ready(30)
    publish(settings, topic, (ttft_key, message(train(seed=4), 3)))  # the topic moves on past the files
    deadline = time.monotonic() + 20
    while server.runtime.version("pool-a", "ttft", "mean") != 3:
        assert time.monotonic() < deadline, "the server did not follow the topic beside its files"
        time.sleep(0.05)
