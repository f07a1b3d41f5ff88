"""llm-d's prediction API on a real predictor server: the reference's JSON shapes, order, errors, readiness."""

from __future__ import annotations

import ssl
import urllib.error

import numpy as np
import pytest

from headroom.contract.features import feature_matrix
from headroom.contract.model_update import decode_update
from headroom.contract.server_state import NO_TOKEN_AGE_MS
from headroom.contract.settings import from_env
from headroom.contract.tls import ServerTls
from headroom.contract.topics import KafkaSettings
from headroom.model_files import write_model_file
from headroom.predictor.runtime import ModelRuntime
from tests.conftest import free_port
from tests.keys import TRUST
from tests.llmd.http import call
from tests.predictor.models import message, train

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def boosters():
    return {(target, objective): train(target, objective=objective, seed=seed)
            for seed, (target, objective) in enumerate([("ttft", "quantile"), ("tpot", "quantile"), ("ttft", "mean"),
                                                        ("tpot", "mean")])}


def runtime_with(boosters, pool="default", models=(("ttft", "quantile"), ("tpot", "quantile"))) -> ModelRuntime:
    runtime = ModelRuntime(trust=TRUST)
    for target, objective in models:
        runtime.apply(message(boosters[target, objective], 1, pool_key=pool, target=target, objective=objective))
    return runtime


def rows(n: int, seed: int = 0, **fixed) -> list[dict]:
    """Rows as llm-d's endpoint picker sends them."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        row = {"kv_cache_percentage": float(rng.uniform(0, 1)), "input_token_length": int(rng.integers(1, 8000)),
               "num_request_waiting": int(rng.integers(0, 20)), "num_request_running": int(rng.integers(0, 64)),
               "num_tokens_generated": int(rng.integers(0, 3)), "prefix_cache_score": float(rng.uniform(0, 1)),
               "prefill_tokens_in_flight": int(rng.integers(0, 50_000)),
               "decode_tokens_in_flight": int(rng.integers(0, 50_000))}
        row.update(fixed)
        out.append(row)
    return out


def expected(booster, sent: list[dict]) -> np.ndarray:
    """XGBoost's own predictions for the rows, their features written out by hand."""
    def col(name: str, default: float = 0.0) -> np.ndarray:
        return np.array([r.get(name, default) for r in sent], dtype=np.float64)

    features = feature_matrix({
        "kv_cache_usage": col("kv_cache_percentage"), "num_waiting": col("num_request_waiting"),
        "num_running": col("num_request_running"), "prompt_tokens": col("input_token_length"),
        "prefix_match": col("prefix_cache_score"), "inflight_requests": col("none"),
        "inflight_prompt_tokens": col("none"),
        "max_tokens": col("none"), "inflight_prefill_tokens": col("prefill_tokens_in_flight"),
        "last_token_age_ms": col("none", NO_TOKEN_AGE_MS), "token_interval_ms": col("none"),
        "inflight_decode_tokens": col("decode_tokens_in_flight"), "encoder_matched_size": col("encoder_matched_size"),
        "encoder_input_size": col("encoder_input_size")})
    return booster.inplace_predict(features)


def base(server) -> str:
    return f"http://127.0.0.1:{server.http_port}"


def test_strict_bulk_answers_10000_rows_in_their_order(start_server, boosters):
    server = start_server(runtime=runtime_with(boosters), http_port=0)
    sent = rows(10_000, seed=3)
    status, body = call(base(server), "/predict/bulk/strict", {"requests": sent})
    assert status == 200
    assert (body["total_requests"], body["successful_predictions"], body["failed_predictions"]) == (10_000, 10_000, 0)
    predictions = body["predictions"]
    assert len(predictions) == 10_000
    np.testing.assert_allclose([p["ttft_ms"] for p in predictions], expected(boosters["ttft", "quantile"], sent),
                               rtol=1e-5)
    np.testing.assert_allclose([p["tpot_ms"] for p in predictions], expected(boosters["tpot", "quantile"], sent),
                               rtol=1e-5)
    first = predictions[0]
    assert set(first) == {"ttft_ms", "tpot_ms", "predicted_at", "model_type", "objective_type", "quantile",
                          "last_model_load", "ttft_source", "tpot_source"}
    assert (first["ttft_source"], first["tpot_source"]) == ("model", "model")
    assert (first["model_type"], first["objective_type"], first["quantile"]) == ("xgboost", "quantile", 0.9)
    assert body["processing_time_ms"] > 0


def test_a_mean_deployment_answers_with_the_mean_models(start_server, boosters):
    runtime = runtime_with(boosters, models=list(boosters))
    server = start_server(runtime=runtime, http_port=0, http_objective="mean")
    sent = rows(50, seed=4)
    status, body = call(base(server), "/predict/bulk/strict", {"requests": sent})
    assert status == 200 and body["predictions"][0]["objective_type"] == "mean"
    np.testing.assert_allclose([p["ttft_ms"] for p in body["predictions"]], expected(boosters["ttft", "mean"], sent),
                               rtol=1e-5)


ROW = rows(1, seed=5)[0]


@pytest.mark.parametrize(("body", "detail"), [
    ({"requests": [dict(ROW, kv_cache_percentage=1.5)]},
     [{"type": "less_than_equal", "loc": ["body", "requests", 0, "kv_cache_percentage"],
       "msg": "Input should be less than or equal to 1", "input": 1.5, "ctx": {"le": 1.0}}]),
    ({"requests": [ROW, {k: v for k, v in ROW.items() if k != "num_request_running"}]},
     [{"type": "missing", "loc": ["body", "requests", 1, "num_request_running"], "msg": "Field required",
       "input": {k: v for k, v in ROW.items() if k != "num_request_running"}}]),
    ({"requests": [dict(ROW, num_request_waiting=-2, input_token_length=3.5, pod_type=2)]},
     [{"type": "int_from_float", "loc": ["body", "requests", 0, "input_token_length"],
       "msg": "Input should be a valid integer, got a number with a fractional part", "input": 3.5},
      {"type": "greater_than_equal", "loc": ["body", "requests", 0, "num_request_waiting"],
       "msg": "Input should be greater than or equal to 0", "input": -2, "ctx": {"ge": 0}},
      {"type": "string_type", "loc": ["body", "requests", 0, "pod_type"],
       "msg": "Input should be a valid string", "input": 2}]),
    ({"requests": [dict(ROW, prefix_cache_score="0.5")]},
     [{"type": "float_type", "loc": ["body", "requests", 0, "prefix_cache_score"],
       "msg": "Input should be a valid number", "input": "0.5"}]),
    ({"requests": []},
     [{"type": "too_short", "loc": ["body", "requests"],
       "msg": "List should have at least 1 item after validation, not 0", "input": [],
       "ctx": {"field_type": "List", "min_length": 1, "actual_length": 0}}]),
    ({"rows": []}, [{"type": "missing", "loc": ["body", "requests"], "msg": "Field required", "input": {"rows": []}}]),
    ({"requests": [dict(ROW, encoder_input_size=1, encoder_matched_size=2)]},
     [{"type": "value_error", "loc": ["body", "requests", 0], "msg": "Value error, encoder_matched_size 2 exceeds "
       "encoder_input_size 1", "input": dict(ROW, encoder_input_size=1, encoder_matched_size=2, pod_type="")}]),
    ({"requests": [dict(ROW, num_request_running=10**9 + 1)]},
     [{"type": "less_than_equal", "loc": ["body", "requests", 0, "num_request_running"],
       "msg": "Input should be less than or equal to 1000000000", "input": 10**9 + 1, "ctx": {"le": 10**9}}]),
    ({"requests": [dict(ROW, kv_cache_percentage=10**400)]},  # past any float
     [{"type": "less_than_equal", "loc": ["body", "requests", 0, "kv_cache_percentage"],
       "msg": "Input should be less than or equal to 1", "input": 10**400, "ctx": {"le": 1.0}}]),
], ids=["above-range", "missing", "several", "string-number", "empty", "no-requests", "encoder-match",
        "count-above-a-billion", "fraction-of-400-digits"])
@pytest.mark.parametrize("route", ["/predict/bulk/strict", "/predict/bulk"])
def test_bulk_refuses_any_invalid_row_with_fastapis_422_body(start_server, boosters, body, detail, route):
    server = start_server(runtime=runtime_with(boosters), http_port=0)
    assert call(base(server), route, body) == (422, {"detail": detail})


def test_a_body_too_large_or_not_json_is_a_422(start_server, boosters):
    server = start_server(runtime=runtime_with(boosters), http_port=0)
    status, body = call(base(server), "/predict/bulk/strict", {"requests": [ROW] * 10_001})
    assert status == 422 and body["detail"][0]["type"] == "too_long"
    assert body["detail"][0]["ctx"]["actual_length"] == 10_001
    status, body = call(base(server), "/predict/bulk/strict", raw=b'{"requests": [')
    assert status == 422 and body["detail"][0]["type"] == "json_invalid"


def test_a_target_without_a_model_is_answered_with_the_prior_labelled_and_counted(start_server, boosters):
    runtime = runtime_with(boosters, pool="default-prefill", models=[("ttft", "quantile")])
    server = start_server(runtime=runtime, http_port=0)
    sent = rows(2, seed=7, pod_type="prefill")
    for route in ("/predict/bulk/strict", "/predict/bulk"):
        status, body = call(base(server), route, {"requests": sent})
        assert status == 200 and body["successful_predictions"] == 2
        assert [(p["ttft_source"], p["tpot_source"], p["tpot_ms"]) for p in body["predictions"]] == \
            [("model", "prior", 1.0)] * 2
        np.testing.assert_allclose([p["ttft_ms"] for p in body["predictions"]],
                                   expected(boosters["ttft", "quantile"], sent), rtol=1e-5)
    status, body = call(base(server), "/predict", dict(ROW, pod_type="decode"))
    assert status == 200 and (body["tpot_ms"], body["tpot_source"], body["ttft_source"]) == (1.0, "prior", "model")
    status, state = call(base(server), "/status")
    assert (state["is_ready"], state["models_exist"], state["answered_with_prior"], state["prior_ms"]) == \
        (True, {"ttft_model": True, "tpot_model": False}, ["tpot"], 1.0)
    assert state["ensemble_active"] is False and "training_server_url" in state
    text = call(base(server), "/metrics")[1]
    assert 'headroom_predictor_http_prior_predictions_total{target="tpot"} 5.0' in text
    assert 'headroom_predictor_http_prior_predictions_total{target="ttft"}' not in text
    assert 'headroom_predictor_http_requests_total{route="/predict/bulk/strict",status="200"} 1.0' in text
    assert 'headroom_predictor_http_requests_total{route="/predict",status="200"} 1.0' in text
    assert "headroom_predictor_candidates_total 5.0" in text and "headroom_predictor_predictions_total 5.0" in text


def test_without_the_prior_a_row_no_model_answers_is_refused(start_server, boosters):
    runtime = runtime_with(boosters, pool="default-prefill", models=[("ttft", "quantile")])
    server = start_server(runtime=runtime, http_port=0, http_prior_ms=-1.0)
    sent = rows(2, seed=7, pod_type="prefill")
    status, body = call(base(server), "/predict/bulk", {"requests": sent})
    assert status == 200 and body["predictions"] == [None, None] and body["failed_predictions"] == 2
    missing = "no live quantile TPOT model for pool key 'default-prefill' (pod_type 'prefill') yet"
    assert body["errors"] == [{"index": i, "error": missing, "request": dict(sent[i], encoder_input_size=0,
                                                                              encoder_matched_size=0)}
                              for i in range(2)]
    assert call(base(server), "/predict/bulk/strict", {"requests": sent}) == (503, {"detail": missing})
    assert call(base(server), "/readyz")[0] == 503
    text = call(base(server), "/metrics")[1]
    assert 'headroom_predictor_http_requests_total{route="/predict/bulk/strict",status="503"} 1.0' in text


@pytest.mark.parametrize("pod_type", ["", None, "monolithic", "both", "invalid_type"])
def test_any_other_pod_type_is_a_monolithic_server(start_server, boosters, pod_type):
    server = start_server(runtime=runtime_with(boosters), http_port=0)
    sent = [dict(row, pod_type=pod_type) for row in rows(3, seed=12)]
    status, body = call(base(server), "/predict/bulk/strict", {"requests": sent})
    assert status == 200
    np.testing.assert_allclose([p["ttft_ms"] for p in body["predictions"]],
                               expected(boosters["ttft", "quantile"], sent), rtol=1e-5)


def test_a_role_is_answered_by_its_own_models_then_the_other_roles(start_server, boosters):
    decode_ttft = train("ttft", objective="quantile", seed=11, scale=3.0)
    runtime = runtime_with(boosters, pool="llama-prefill", models=[("ttft", "quantile")])
    runtime.apply(message(decode_ttft, 1, pool_key="llama-decode", target="ttft", objective="quantile"))
    runtime.apply(message(boosters["tpot", "quantile"], 1, pool_key="llama-decode", target="tpot",
                          objective="quantile"))
    server = start_server(runtime=runtime, http_port=0, http_pool_key="llama")
    sent = rows(20, seed=8, pod_type="prefill") + rows(20, seed=9, pod_type="decode")
    status, body = call(base(server), "/predict/bulk/strict", {"requests": sent})
    assert status == 200
    ttft = [p["ttft_ms"] for p in body["predictions"]]
    np.testing.assert_allclose(ttft[:20], expected(boosters["ttft", "quantile"], sent[:20]), rtol=1e-5)
    np.testing.assert_allclose(ttft[20:], expected(decode_ttft, sent[20:]), rtol=1e-5)
    np.testing.assert_allclose([p["tpot_ms"] for p in body["predictions"]],
                               expected(boosters["tpot", "quantile"], sent), rtol=1e-5)  # the decode role's TPOT


def test_single_predict(start_server, boosters):
    server = start_server(runtime=runtime_with(boosters), http_port=0)
    status, body = call(base(server), "/predict", ROW)
    assert status == 200
    assert body["ttft_ms"] == pytest.approx(float(expected(boosters["ttft", "quantile"], [ROW])[0]), rel=1e-5)
    status, body = call(base(server), "/predict", dict(ROW, num_tokens_generated=None))
    assert status == 422 and body["detail"][0]["loc"] == ["body", "num_tokens_generated"]


def test_readyz_answers_once_the_sources_are_read_and_waits_for_models_only_without_the_prior(start_server,
                                                                                                  boosters):
    runtime = ModelRuntime(trust=TRUST)
    server = start_server(runtime=runtime, http_port=0)
    assert call(base(server), "/readyz") == (200, {"status": "ready", "model_type": "xgboost",
                                                   "objective_type": "quantile", "quantile": 0.9,
                                                   "answered_with_prior": ["ttft", "tpot"]})
    status, body = call(base(server), "/predict/bulk/strict", {"requests": [ROW]})
    assert status == 200 and body["predictions"][0]["last_model_load"] is None
    assert (body["predictions"][0]["ttft_source"], body["predictions"][0]["tpot_source"]) == ("prior", "prior")
    strict = start_server(runtime=ModelRuntime(trust=TRUST), http_port=0, http_prior_ms=-1.0)
    strict.runtime.apply(message(boosters["ttft", "quantile"], 1, pool_key="default", target="ttft",
                                 objective="quantile"))
    strict.runtime.apply(message(boosters["tpot", "mean"], 1, pool_key="default", target="tpot", objective="mean"))
    status, body = call(base(strict), "/readyz")  # a TPOT model, but not of this deployment's objective
    assert status == 503 and "no live quantile TPOT model yet" in body["detail"]
    status, body = call(base(strict), "/status")
    assert status == 200 and body["is_ready"] is False and body["models_exist"] == {"ttft_model": True,
                                                                                     "tpot_model": False}
    strict.runtime.apply(message(boosters["tpot", "quantile"], 1, pool_key="default", target="tpot",
                                 objective="quantile"))
    assert call(base(strict), "/readyz")[1]["answered_with_prior"] == []
    status, body = call(base(strict), "/status")
    assert body["is_ready"] is True and body["last_model_load"] is not None and body["prior_ms"] is None
    assert call(base(strict), "/healthz") == (200, {"status": "ok", "service": "headroom-latency-predictor"})
    assert call(base(strict), "/")[1]["is_ready"] is True
    nowhere = from_env(KafkaSettings, {}, bootstrap_servers=f"127.0.0.1:{free_port()}")
    unread = start_server(kafka=nowhere, http_port=0)
    status, body = call(base(unread), "/readyz")  # a topic it cannot read: not ready, prior or not
    assert status == 503 and "have not been read" in body["detail"]


def test_reload_looks_at_the_model_files_now(start_server, boosters, tmp_path):
    server = start_server(http_port=0, models=str(tmp_path), models_poll_s=3600.0, http_prior_ms=-1.0)
    assert call(base(server), "/readyz")[0] == 503
    for target in ("ttft", "tpot"):
        raw = message(boosters[target, "quantile"], 4, pool_key="default", target=target, objective="quantile")
        write_model_file(tmp_path, decode_update(raw, TRUST), raw)
    status, body = call(base(server), "/reload", method="POST")
    assert status == 200 and (body["synced"], body["is_ready"], body["loaded"]) == (True, True, True)
    assert call(base(server), "/readyz")[0] == 200
    assert call(base(server), "/reload", method="POST")[1]["synced"] is False  # nothing changed since


def test_the_api_takes_the_listeners_tls_settings(start_server, boosters, pki):
    tls = ServerTls(cert_file=pki.server[0], key_file=pki.server[1], client_ca_file=pki.ca)
    server = start_server(runtime=runtime_with(boosters), http_port=0, tls=tls)
    url = f"https://127.0.0.1:{server.http_port}"
    client = ssl.create_default_context(cafile=str(pki.ca))
    client.load_cert_chain(*map(str, pki.client))
    assert call(url, "/predict", ROW, context=client)[0] == 200
    anonymous = ssl.create_default_context(cafile=str(pki.ca))  # no client certificate: refused (mTLS)
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
        call(url, "/readyz", context=anonymous)
    with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP is not served beside it
        call(base(server), "/readyz")
