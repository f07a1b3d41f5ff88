import threading
import urllib.request

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from headroom.contract.features import FEATURE_NAMES, FEATURE_SCHEMA, RAW_COLUMNS
from headroom.predictor.proto import prediction_pb2, prediction_pb2_grpc
from headroom.predictor.runtime import ModelRuntime
from headroom.predictor.server import SERVICE_NAME
from tests.keys import TEST_KEY, TRUST
from tests.predictor.models import candidate_rows, message, train

ROWS = candidate_rows(30, seed=11)
WIDTH = len(FEATURE_NAMES)


@pytest.fixture(scope="module")
def boosters():
    return {"ttft": train(seed=1), "p90": train(objective="quantile", seed=2), "tpot": train("tpot", seed=3)}


def runtime_with(boosters) -> ModelRuntime:
    runtime = ModelRuntime(trust=TRUST)
    runtime.apply(message(boosters["ttft"], 3))
    runtime.apply(message(boosters["p90"], 2, objective="quantile"))
    runtime.apply(message(boosters["tpot"], 1, target="tpot"))
    return runtime


def request(rows=ROWS, pool_key="pool-a", **fields):
    return prediction_pb2.PredictRequest(pool_key=pool_key, n_features=rows.shape[1] if rows.ndim == 2 else WIDTH,
                                         features_f32le=rows.astype("<f4").tobytes(), **fields)


def raw_request(columns: dict, pool_key="pool-a"):
    return prediction_pb2.PredictRequest(pool_key=pool_key, raw=prediction_pb2.RawColumns(columns={
        name: prediction_pb2.RawColumn(values=values) for name, values in columns.items()}))


RAW = {name: ROWS[:, i].tolist() for i, name in enumerate(RAW_COLUMNS)}


def stub_of(server):
    channel = grpc.insecure_channel(server.address)
    return channel, prediction_pb2_grpc.PredictionServiceStub(channel)


def test_predicts_every_model_with_versions(start_server, boosters):
    server = start_server(runtime=runtime_with(boosters))
    channel, stub = stub_of(server)
    with channel:
        for req in (request(feature_schema=FEATURE_SCHEMA),
                    prediction_pb2.PredictRequest(pool_key="pool-a", n_features=WIDTH,
                                                  features=prediction_pb2.FloatRows(values=ROWS.ravel()))):
            response = stub.Predict(req, timeout=5)
            got = {(p.target, p.objective): (p.version, np.frombuffer(p.values_f32le, "<f4"))
                   for p in response.predictions}
            assert response.n_rows == len(ROWS)
            assert {key: version for key, (version, _) in got.items()} == \
                {("ttft", "mean"): 3, ("ttft", "quantile"): 2, ("tpot", "mean"): 1}
            np.testing.assert_allclose(got["ttft", "mean"][1], boosters["ttft"].inplace_predict(ROWS), rtol=1e-6)
            np.testing.assert_allclose(got["ttft", "quantile"][1], boosters["p90"].inplace_predict(ROWS),
                                       rtol=1e-6)
            assert [p.quantile for p in response.predictions if p.objective == "quantile"] == \
                [pytest.approx(0.9)]


def test_raw_columns_get_their_features_computed_by_the_server(start_server, boosters):
    server = start_server(runtime=runtime_with(boosters))
    channel, stub = stub_of(server)
    shared = dict(RAW, prompt_tokens=[700.0])  # a request's own field: one value for every row
    packed = ROWS.copy()
    packed[:, RAW_COLUMNS.index("prompt_tokens")] = 700.0
    packed[:, FEATURE_NAMES.index("effective_prompt_tokens")] = 700.0 * (1 - packed[:, RAW_COLUMNS.index("prefix_match")])
    left_out = ("token_interval_ms", "encoder_input_size", "encoder_matched_size")
    defaults = {k: v for k, v in RAW.items() if k not in left_out}
    no_rhythm = ROWS.copy()
    no_rhythm[:, [RAW_COLUMNS.index(name) for name in left_out]] = 0.0
    with channel:
        for columns, rows in ((RAW, ROWS), (shared, packed), (defaults, no_rhythm)):
            by_raw = stub.Predict(raw_request(columns), timeout=5)
            by_rows = stub.Predict(request(rows), timeout=5)
            assert by_raw.n_rows == len(ROWS)
            assert [p.values_f32le for p in by_raw.predictions] == [p.values_f32le for p in by_rows.predictions]


def _bad_rows():
    nan = ROWS.copy()
    nan[4, 2] = np.nan
    return nan


@pytest.mark.parametrize(("make", "code", "text"), [
    (lambda: request(ROWS[:, :7]), grpc.StatusCode.INVALID_ARGUMENT, "n_features is 7"),
    (lambda: prediction_pb2.PredictRequest(pool_key="pool-a", n_features=WIDTH, features_f32le=b"\0" * (4 * WIDTH + 4)),
     grpc.StatusCode.INVALID_ARGUMENT, f"{4 * WIDTH + 4} bytes, not a whole number of rows"),
    (lambda: request(_bad_rows()), grpc.StatusCode.INVALID_ARGUMENT, "non-finite feature 'num_running' = nan in row 4"),
    (lambda: request(ROWS[:0]), grpc.StatusCode.INVALID_ARGUMENT, "empty batch"),
    (lambda: prediction_pb2.PredictRequest(pool_key="pool-a", n_features=WIDTH), grpc.StatusCode.INVALID_ARGUMENT,
     "empty batch"),
    (lambda: request(pool_key="nowhere"), grpc.StatusCode.INVALID_ARGUMENT, "no model for pool key 'nowhere'"),
    (lambda: request(feature_schema="v0:x"), grpc.StatusCode.INVALID_ARGUMENT, "feature_schema 'v0:x' differs"),
    (lambda: raw_request({**RAW, "colour": [1.0]}), grpc.StatusCode.INVALID_ARGUMENT, "unknown raw column 'colour'"),
    (lambda: raw_request({k: v for k, v in RAW.items() if k != "prefix_match"}), grpc.StatusCode.INVALID_ARGUMENT,
     "raw column 'prefix_match' is missing and has no default"),
    (lambda: raw_request({**RAW, "num_waiting": [1.0, 2.0]}), grpc.StatusCode.INVALID_ARGUMENT,
     "different numbers of rows"),
    (lambda: raw_request({**RAW, "kv_cache_usage": [0.5] * 29 + [1.5]}), grpc.StatusCode.INVALID_ARGUMENT,
     "raw column 'kv_cache_usage' is a fraction and must be finite and within [0, 1], got 1.5 in row 29"),
    (lambda: raw_request({**RAW, "num_running": [-1.0]}), grpc.StatusCode.INVALID_ARGUMENT,
     "'num_running' is a count and must be finite and within [0, 1e+09], got -1.0"),
    (lambda: raw_request({**RAW, "num_waiting": [2e9]}), grpc.StatusCode.INVALID_ARGUMENT,
     "'num_waiting' is a count and must be finite and within [0, 1e+09], got 2000000000.0"),
    (lambda: raw_request({**RAW, "encoder_input_size": [2.0], "encoder_matched_size": [0.0] * 29 + [3.0]}),
     grpc.StatusCode.INVALID_ARGUMENT, "encoder_matched_size 3 exceeds encoder_input_size 2 in row 29"),
], ids=["feature-count", "ragged-bytes", "non-finite", "no-rows", "no-rows-field", "unknown-pool", "schema",
        "raw-unknown", "raw-missing", "raw-ragged", "raw-range", "raw-negative", "raw-over-the-contract-bound",
        "raw-encoder-match-beyond-the-input"])
def test_bad_requests_get_precise_status_and_the_server_keeps_serving(start_server, boosters, make, code, text):
    server = start_server(runtime=runtime_with(boosters))
    channel, stub = stub_of(server)
    with channel:
        with pytest.raises(grpc.RpcError) as failure:
            stub.Predict(make(), timeout=5)
        assert failure.value.code() == code
        assert text in failure.value.details()
        assert stub.Predict(request(), timeout=5).n_rows == len(ROWS)


def test_calls_beyond_max_concurrent_calls_are_refused_with_resource_exhausted(start_server, boosters):
    server = start_server(runtime=runtime_with(boosters), max_concurrent_calls=2, workers=2, reflection=True)
    channel, stub = stub_of(server)
    release = threading.Event()

    def asking():  # one question, then the stream stays open until released
        yield reflection_pb2.ServerReflectionRequest(list_services="")
        release.wait(30)

    with channel:
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo
        held = [reflect(asking(), timeout=30) for _ in range(2)]
        for call in held:
            next(call)  # its first answer: the call is being served, and holds its slot
        with pytest.raises(grpc.RpcError) as refused:
            stub.Predict(request(), timeout=5)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        release.set()
        for call in held:
            assert list(call) == []  # the streams end
        for _ in range(100):  # the server frees the slots as the held calls complete
            try:
                assert stub.Predict(request(), timeout=5).n_rows == len(ROWS)
                break
            except grpc.RpcError as err:
                assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                server.wait(0.05)
        else:
            pytest.fail("the held calls' slots were never freed")


def test_unavailable_and_not_serving_before_the_first_model(start_server, boosters):
    runtime = ModelRuntime(trust=TRUST)
    server = start_server(runtime=runtime)
    channel, stub = stub_of(server)
    with channel:
        with pytest.raises(grpc.RpcError) as failure:
            stub.Predict(request(), timeout=5)
        assert failure.value.code() == grpc.StatusCode.UNAVAILABLE
        check = health_pb2_grpc.HealthStub(channel).Check
        assert check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5).status == \
            health_pb2.HealthCheckResponse.NOT_SERVING
        runtime.apply(message(boosters["ttft"], 1))
        status = None
        for _ in range(100):
            status = check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5).status
            if status == health_pb2.HealthCheckResponse.SERVING:
                break
            server.wait(0.05)
        assert status == health_pb2.HealthCheckResponse.SERVING
        assert stub.Predict(request(), timeout=5).predictions[0].version == 1


def list_services(server) -> set[str]:
    with grpc.insecure_channel(server.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        answers = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                            timeout=5)
        return {s.name for answer in answers for s in answer.list_services_response.service}


def test_reflection_lists_the_services_when_asked_for(start_server, boosters):
    server = start_server(runtime=runtime_with(boosters), reflection=True)
    assert {SERVICE_NAME, "grpc.health.v1.Health"} <= list_services(server)


def test_reflection_is_off_by_default(start_server, boosters):
    server = start_server(runtime=runtime_with(boosters))
    with pytest.raises(grpc.RpcError) as refused:
        list_services(server)
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_metrics_endpoint_reports_served_and_models(start_server, boosters):
    runtime = runtime_with(boosters)
    runtime.apply(b"not a model update")
    server = start_server(runtime=runtime)
    channel, stub = stub_of(server)
    with channel:
        stub.Predict(request(), timeout=5)
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
    assert f"headroom_predictor_candidates_total {float(len(ROWS))}" in text
    assert 'headroom_predictor_model_version{objective="mean",pool_key="pool-a",target="ttft"} 3.0' in text
    assert 'headroom_predictor_model_updates_total{outcome="rejected",reason="unsigned"} 1.0' in text
    assert f'headroom_predictor_model_signer{{objective="mean",pool_key="pool-a",signer="{TEST_KEY.key_id}",' \
           f'target="ttft"}} 1.0' in text
    assert "headroom_predictor_request_seconds_bucket" in text
    assert "headroom_predictor_model_age_seconds" in text


def test_stop_is_graceful_and_frees_the_port(start_server, boosters):
    server = start_server(runtime=runtime_with(boosters))
    channel, stub = stub_of(server)
    with channel:
        assert stub.Predict(request(), timeout=5).n_rows == len(ROWS)
    server.stop(grace=1.0)
    assert server.wait(0)
    channel, stub = stub_of(server)
    with channel, pytest.raises(grpc.RpcError) as failure:
        stub.Predict(request(), timeout=2)
    assert failure.value.code() == grpc.StatusCode.UNAVAILABLE


def test_a_second_instance_on_a_taken_port_fails_clearly(start_server, boosters):
    first = start_server(runtime=runtime_with(boosters))
    with pytest.raises(OSError, match=f"cannot bind the gRPC address 127.0.0.1:{first.port}"):
        start_server(runtime=runtime_with(boosters), port=first.port)
