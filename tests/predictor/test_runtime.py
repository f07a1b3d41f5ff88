import json
import threading

import numpy as np
import pytest
import xgboost

from headroom.contract.features import FEATURE_NAMES
from headroom.contract.probe import PROBE_ATTRIBUTE, PROBE_ROWS
from headroom.predictor.errors import InvalidBatch, NotReady, UnknownPool
from headroom.predictor.runtime import ApplyOutcome, ModelRuntime
from tests.keys import TEST_KEY, TRUST
from tests.predictor.models import candidate_rows, message, train

ROWS = candidate_rows(50, seed=3)


@pytest.fixture(scope="module")
def boosters():
    return {"v1": train(seed=1), "v2": train(seed=2, trees=30), "p90": train(objective="quantile", seed=3),
            "tpot": train("tpot", seed=4)}


def test_applies_and_predicts_every_model_of_the_pool(boosters):
    runtime = ModelRuntime(trust=TRUST)
    assert runtime.apply(message(boosters["v1"], 1)).outcome is ApplyOutcome.APPLIED
    assert runtime.apply(message(boosters["p90"], 1, objective="quantile", model_format="json")).outcome \
        is ApplyOutcome.APPLIED
    assert runtime.apply(message(boosters["tpot"], 5, target="tpot")).outcome is ApplyOutcome.APPLIED
    prediction = runtime.predict("pool-a", ROWS)
    np.testing.assert_allclose(prediction.get("ttft"), boosters["v1"].inplace_predict(ROWS), rtol=1e-6)
    np.testing.assert_allclose(prediction.get("ttft", "quantile"), boosters["p90"].inplace_predict(ROWS), rtol=1e-6)
    np.testing.assert_allclose(prediction.get("tpot"), boosters["tpot"].inplace_predict(ROWS), rtol=1e-6)
    assert prediction.get("e2e") is None
    assert sorted((m.target, m.objective, m.version) for m in prediction.models) == \
        [("tpot", "mean", 5), ("ttft", "mean", 1), ("ttft", "quantile", 1)]


def test_the_live_version_again_is_ignored_and_an_older_one_is_a_counted_replay(boosters):
    runtime = ModelRuntime(trust=TRUST)
    runtime.apply(message(boosters["v2"], 2))
    assert runtime.apply(message(boosters["v1"], 2)).outcome is ApplyOutcome.STALE
    replayed = runtime.apply(message(boosters["v1"], 1))
    assert (replayed.outcome, replayed.reason) == (ApplyOutcome.REJECTED, "replayed")
    assert runtime.stale == 1 and runtime.rejected == {"replayed": 1}
    np.testing.assert_allclose(runtime.predict("pool-a", ROWS).get("ttft"), boosters["v2"].inplace_predict(ROWS),
                               rtol=1e-6)


def _corrupt(raw: bytes) -> bytes:
    data = bytearray(raw)
    data[-5] ^= 0xFF
    return bytes(data)


def _leaf_overflow(booster: xgboost.Booster) -> bytes:
    model = json.loads(bytes(booster.save_raw("json")))
    for tree in model["learner"]["gradient_booster"]["model"]["trees"]:
        tree["split_conditions"] = [3e38 if left == -1 else value
                                    for left, value in zip(tree["left_children"], tree["split_conditions"])]
    return json.dumps(model).encode()  # float32 sum overflows to inf


def _stamped_with(booster: xgboost.Booster, text: str) -> xgboost.Booster:
    booster = booster.copy()
    booster.set_attr(**{PROBE_ATTRIBUTE: text})
    return booster


def _bad_updates(boosters):
    five_features = xgboost.train({"nthread": 1}, xgboost.DMatrix(ROWS[:, :5], label=ROWS[:, 0]), 3)
    others = json.dumps([float(v) for v in boosters["v1"].inplace_predict(PROBE_ROWS)])
    return {
        "corrupt bytes": (_corrupt(message(boosters["v2"], 2)), "bad-signature"),
        "signed corrupt bytes": (TEST_KEY.sign(_corrupt(message(boosters["v2"], 2, key=None))), "checksum"),
        "signed garbage": (TEST_KEY.sign(b"garbage" * 10), "decode"),
        "not a message": (b"garbage" * 10, "unsigned"),
        "wrong schema": (message(boosters["v2"], 2, feature_schema="v0:a,b"), "schema"),
        "wrong feature count": (message(five_features, 2), "schema"),
        "infinite output": (message(_leaf_overflow(boosters["v2"]), 2, model_format="json"), "range"),
        "negative output": (message(train(seed=5, scale=-1.0), 2), "probe"),
        "objective mismatch": (message(boosters["p90"], 2), "objective"),
        "not xgboost": (message(b"{\"learner\": 1}", 2, model_format="json"), "model"),
        "another model's probe outputs": (message(_stamped_with(boosters["v2"], others), 2, stamped=False), "probe"),
        "malformed probe outputs": (message(_stamped_with(boosters["v2"], "[1, 2]"), 2, stamped=False), "probe"),
        "probe outputs not finite": (message(_stamped_with(boosters["v2"], others.replace("[", "[NaN, ", 1)
                                                           .rsplit(",", 1)[0] + "]"), 2, stamped=False), "probe"),
    }


def test_versions_out_of_range_or_jumping_ahead_are_rejected_and_counted(boosters):
    runtime = ModelRuntime(trust=TRUST, max_version_jump=10)
    runtime.apply(message(boosters["v1"], 1))
    outcomes = [runtime.apply(message(boosters["v2"], v)) for v in (2**64, 12, 11)]
    assert [(r.outcome, r.reason) for r in outcomes] == [(ApplyOutcome.REJECTED, "version"),
                                                         (ApplyOutcome.REJECTED, "version"), (ApplyOutcome.APPLIED, None)]
    assert runtime.rejected["version"] == 2 and runtime.version("pool-a", "ttft", "mean") == 11
    assert runtime.predict("pool-a", ROWS).models[0].version == 11


def test_bad_updates_are_rejected_and_the_old_version_keeps_serving(boosters):
    runtime = ModelRuntime(trust=TRUST)
    runtime.apply(message(boosters["v1"], 1))
    expected = boosters["v1"].inplace_predict(ROWS)
    bad = _bad_updates(boosters)
    for name, (raw, reason) in bad.items():
        result = runtime.apply(raw)
        assert (result.outcome, result.reason) == (ApplyOutcome.REJECTED, reason), name
        assert result.detail
        prediction = runtime.predict("pool-a", ROWS)
        assert prediction.models[0].version == 1
        np.testing.assert_allclose(prediction.get("ttft"), expected, rtol=1e-6)
    assert sum(runtime.rejected.values()) == len(bad)
    assert runtime.apply(message(boosters["v2"], 2)).outcome is ApplyOutcome.APPLIED


def test_prediction_errors_say_what_is_wrong(boosters):
    runtime = ModelRuntime(trust=TRUST)
    with pytest.raises(NotReady):
        runtime.predict("pool-a", ROWS)
    runtime.apply(message(boosters["v1"], 1))
    with pytest.raises(UnknownPool, match="'pool-b'.*pool-a"):
        runtime.predict("pool-b", ROWS)
    with pytest.raises(InvalidBatch, match=f"expected rows of {len(FEATURE_NAMES)} features"):
        runtime.predict("pool-a", ROWS[:, :9])
    with pytest.raises(InvalidBatch, match="empty batch"):
        runtime.predict("pool-a", ROWS[:0])
    bad = ROWS.copy()
    bad[7, 3] = np.inf
    with pytest.raises(InvalidBatch, match="'prompt_tokens' = inf in row 7"):
        runtime.predict("pool-a", bad)


def test_swap_under_concurrent_reads(boosters):
    versions = {1: boosters["v1"], 2: boosters["v2"], 3: train(seed=6), 4: train(seed=7, depth=6)}
    expected = {v: b.inplace_predict(ROWS) for v, b in versions.items()}
    messages = {v: message(b, v) for v, b in versions.items()}
    runtime = ModelRuntime(trust=TRUST)
    runtime.apply(messages[1])
    mismatches, seen, stop = [], set(), threading.Event()

    def read():
        for _ in range(3000):
            if stop.is_set():
                return
            prediction = runtime.predict("pool-a", ROWS)
            version = prediction.models[0].version
            seen.add(version)
            if not np.allclose(prediction.get("ttft"), expected[version], rtol=1e-6):
                mismatches.append(version)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for reader in readers:
        reader.start()
    for version in (2, 3, 4):
        assert runtime.apply(messages[version]).outcome is ApplyOutcome.APPLIED
    stop.set()
    for reader in readers:
        reader.join(timeout=30)
    assert not mismatches
    assert runtime.version("pool-a", "ttft", "mean") == 4
    assert 1 in seen


def test_the_pure_engine_serves_the_same_predictions(boosters):
    runtime = ModelRuntime(trust=TRUST, engine="numpy")
    assert runtime.apply(message(boosters["v1"], 1)).outcome is ApplyOutcome.APPLIED
    np.testing.assert_allclose(runtime.predict("pool-a", ROWS).get("ttft"), boosters["v1"].inplace_predict(ROWS),
                               rtol=1e-6)
    with pytest.raises(ValueError, match="tree engine 'gpu' is unknown"):
        ModelRuntime(trust=TRUST, engine="gpu")
