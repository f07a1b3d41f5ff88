"""A model signed by a trusted key is still served only within bounds: every leaf a finite number (not only the
leaves the 64 probe rows reach), outputs that stay finite, and no more trees, depth or bytes than a reader takes —
each refusal counted with its reason while the old model keeps serving. The last test runs a real prediction
server on model files."""

import json
import os
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
import xgboost

from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.model_update import TRANSFORM_ATTRIBUTE, ModelBounds, encode_update, make_update
from headroom.contract.probe import PROBE_ROWS
from headroom.contract.signing import TrustedKeys
from headroom.model_files import file_name
from headroom.predictor.runtime import ApplyOutcome, ModelRuntime
from tests.conftest import free_port
from tests.keys import TEST_KEY, TRUST, write_public_key
from tests.predictor.models import candidate_rows, message, train

ROWS = candidate_rows(40, seed=5)


def with_unreached_leaf(booster: xgboost.Booster, value: float) -> bytes:
    """``booster``'s JSON with ``value`` in a leaf of its first tree that no probe row reaches."""
    model = json.loads(bytes(booster.save_raw("json")))
    tree = model["learner"]["gradient_booster"]["model"]["trees"][0]
    reached = set(booster.predict(xgboost.DMatrix(PROBE_ROWS), pred_leaf=True)[:, 0].astype(int))
    unreached = [node for node, left in enumerate(tree["left_children"]) if left == -1 and node not in reached]
    tree["split_conditions"][unreached[0]] = value
    raw = json.dumps(model).encode()
    tampered = xgboost.Booster()
    tampered.load_model(bytearray(raw))
    assert np.isfinite(tampered.inplace_predict(PROBE_ROWS)).all()  # the probe alone would pass it
    return raw


@pytest.fixture(scope="module")
def boosters():
    return {"v1": train(seed=1), "v2": train(seed=2), "deep": train(seed=3, depth=6, rows=3000),
            "many": train(seed=4, trees=1200, depth=2, rows=200)}


@pytest.mark.parametrize("case, reason", [
    ("nan leaf outside the probe", "leaf"),
    ("infinite leaf outside the probe", "leaf"),
    ("1200 trees", "trees"),
    ("trees deeper than allowed", "depth"),
    ("more bytes than allowed", "bytes"),
])
def test_a_signed_model_beyond_the_bounds_is_rejected_with_its_reason(boosters, case, reason):
    bounds = ModelBounds(max_depth=5, max_bytes=2_000_000)
    messages = {
        "nan leaf outside the probe": message(with_unreached_leaf(boosters["v2"], float("nan")), 2, model_format="json"),
        "infinite leaf outside the probe": message(with_unreached_leaf(boosters["v2"], float("inf")), 2,
                                                   model_format="json"),
        "1200 trees": message(boosters["many"], 2),
        "trees deeper than allowed": message(boosters["deep"], 2),
        "more bytes than allowed": message(boosters["v2"], 2, model_format="json") + b" " * 2_000_000,
    }
    runtime = ModelRuntime(trust=TrustedKeys([TEST_KEY.public_key], bounds=bounds))
    runtime.apply(message(boosters["v1"], 1))
    serving = runtime.predict("pool-a", ROWS).get("ttft").copy()
    result = runtime.apply(messages[case])
    assert (result.outcome, result.reason) == (ApplyOutcome.REJECTED, reason), result.detail
    assert runtime.rejected == {reason: 1} and runtime.version("pool-a", "ttft", "mean") == 1
    np.testing.assert_array_equal(runtime.predict("pool-a", ROWS).get("ttft"), serving)


def test_the_bounds_are_what_refuses_a_large_model(boosters):
    roomy = ModelRuntime(trust=TrustedKeys([TEST_KEY.public_key], bounds=ModelBounds(max_trees=2000)))
    assert roomy.apply(message(boosters["many"], 1)).outcome is ApplyOutcome.APPLIED
    assert ModelRuntime(trust=TRUST).apply(message(boosters["many"], 1)).reason == "trees"  # the default: 1000


def test_outputs_that_overflow_after_the_log_transform_are_refused(boosters):
    """A leaf of 100 (log milliseconds) no probe row reaches: e^100 ms is beyond every float32."""
    booster = xgboost.Booster()
    booster.load_model(bytearray(with_unreached_leaf(boosters["v2"], 100.0)))
    booster.set_attr(**{TRANSFORM_ATTRIBUTE: "log"})
    update = make_update(model=bytes(booster.save_raw("ubj")), version=1, pool_key="pool-a", target="ttft",
                         objective="mean", feature_schema=FEATURE_SCHEMA, model_format="ubj", created_at=time.time(),
                         output_transform="log")
    result = ModelRuntime(trust=TRUST).apply(TEST_KEY.sign(encode_update(update)))
    assert (result.outcome, result.reason) == (ApplyOutcome.REJECTED, "range"), result.detail


@pytest.mark.e2e
def test_a_prediction_server_refuses_the_models_and_counts_why(boosters, tmp_path):
    """``headroom predictor serve --models DIR`` with a NaN leaf beyond the probe and a 1200-tree model,
    each signed by the trusted key: neither is served, and /metrics counts them by reason."""
    models = tmp_path / "models"
    models.mkdir()
    files = {"pool-a/ttft/mean": message(with_unreached_leaf(boosters["v2"], float("nan")), 1, model_format="json"),
             "pool-b/ttft/mean": message(boosters["many"], 1, pool_key="pool-b"),
             "pool-c/ttft/mean": message(boosters["v1"], 1, pool_key="pool-c")}
    for key, raw in files.items():
        (models / file_name(key)).write_bytes(raw)
    metrics_port = free_port()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HEADROOM_")}
    environ.update(HEADROOM_MODEL_TRUSTED_KEYS=str(write_public_key(tmp_path / "keys")),
                   HEADROOM_PREDICTOR_PORT=str(free_port()), HEADROOM_PREDICTOR_METRICS_PORT=str(metrics_port),
                   HEADROOM_PREDICTOR_HTTP_PORT="-1")
    process = subprocess.Popen([sys.executable, "-m", "headroom.cli.main", "predictor", "serve", "--models",
                                str(models)], env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, ready = time.monotonic() + 120, False
        while not ready and time.monotonic() < deadline and process.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=2) as answer:
                    ready = answer.status == 200
            except OSError:
                time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as answer:
            metrics = answer.read().decode()
    finally:
        process.terminate()
        output = process.communicate(timeout=30)[0]
    assert ready, output
    assert 'outcome="rejected",reason="leaf"} 1.0' in metrics and 'outcome="rejected",reason="trees"} 1.0' in metrics
    assert 'outcome="applied",reason=""} 1.0' in metrics  # pool-c's model is served
    assert "(leaf): tree 0 holds a value that is not a finite number (the leaf at depth" in output
