import json

import numpy as np
import pytest
import xgboost
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headroom.contract.model_update import RejectedUpdate, load_booster
from headroom.predictor.forest import UnsupportedModel, forest_from_booster, forest_from_model
from headroom.predictor.kernels import ForestStack, available_engines, evaluate
from tests.predictor.models import candidate_rows, train


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), depth=st.integers(1, 8), trees=st.integers(1, 25),
       quantile=st.sampled_from([None, 0.1, 0.5, 0.9]), missing=st.floats(0.0, 0.3),
       rows=st.integers(1, 40))
def test_evaluation_equals_xgboost(seed, depth, trees, quantile, missing, rows):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 10, (300, 6)).astype(np.float32)
    x[rng.random(x.shape) < missing] = np.nan
    y = np.nan_to_num(x[:, 0]) * 3 + np.abs(np.nan_to_num(x[:, 1])) ** 1.5 + rng.normal(0, 1, 300)
    params = {"max_depth": depth, "nthread": 1, "tree_method": "hist", "seed": seed, "eta": 0.3,
              "base_score": float(rng.uniform(-50, 50))}
    if quantile is not None:
        params.update(objective="reg:quantileerror", quantile_alpha=quantile)
    booster = xgboost.train(params, xgboost.DMatrix(x, label=y), trees)
    query = rng.normal(0, 12, (rows, 6)).astype(np.float32)
    query[rng.random(query.shape) < missing] = np.nan
    forest = forest_from_booster(booster)
    splits = np.isfinite(forest.thresholds)
    for row, (feature, threshold) in enumerate(zip(forest.features[splits][:rows], forest.thresholds[splits])):
        query[row, feature] = threshold  # exactly on a split: must go right
    expected = booster.inplace_predict(query)
    stack = ForestStack.of([forest])
    for engine in available_engines():
        np.testing.assert_allclose(evaluate(stack, query, engine)[0], expected, rtol=1e-6, atol=1e-5)


def test_several_models_in_one_pass_equal_each_booster():
    boosters = [train("ttft", seed=1, trees=40, depth=6), train("tpot", seed=2, trees=30, depth=3),
                train("ttft", "quantile", seed=3, trees=25, depth=5)]
    rows = candidate_rows(100, seed=9)
    stack = ForestStack.of([forest_from_booster(b) for b in boosters])
    for engine in available_engines():
        got = evaluate(stack, rows, engine)
        for index, booster in enumerate(boosters):
            np.testing.assert_allclose(got[index], booster.inplace_predict(rows), rtol=1e-6)


def test_json_and_ubj_give_the_same_forest_and_attributes():
    booster = train(seed=4)
    booster.set_attr(headroom_output_transform="log")
    from_json = forest_from_model(bytes(booster.save_raw("json")))
    from_ubj = forest_from_model(bytes(booster.save_raw("ubj")))
    assert from_json.base_score == from_ubj.base_score
    np.testing.assert_array_equal(from_json.leaves, from_ubj.leaves)
    np.testing.assert_array_equal(from_json.thresholds, from_ubj.thresholds)
    np.testing.assert_array_equal(from_json.default_left, from_ubj.default_left)
    assert from_json.attributes == from_ubj.attributes == {"headroom_output_transform": "log"}


@pytest.mark.parametrize(("change", "says"), [
    (lambda tree: tree["left_children"].__setitem__(0, 99), "links its node 0 to 99"),
    (lambda tree: tree["right_children"].__setitem__(0, -1), "not both nodes of that tree"),
    (lambda tree: tree["left_children"].__setitem__(0, -5), "links its node 0 to -5"),
    (lambda tree: tree["split_indices"].__setitem__(0, 16), "splits on feature 16, outside the model's 16"),
    (lambda tree: tree["split_indices"].__setitem__(0, -2), "splits on feature -2"),
    (lambda tree: tree["default_left"].pop(), "has 6 'default_left' for 7 nodes"),
])
def test_trees_that_do_not_hold_together_are_refused_by_name(change, says):
    model = json.loads(bytes(train(trees=3, depth=2).save_raw("json")))
    change(model["learner"]["gradient_booster"]["model"]["trees"][1])
    with pytest.raises(UnsupportedModel, match=says):
        forest_from_model(json.dumps(model).encode())


@pytest.mark.parametrize(("text", "expected"), [("[1.23E2]", 123.0), ("5E-1", 0.5), ("[-2.5E0]", -2.5)],
                         ids=["xgboost3-vector", "scalar", "negative"])
def test_base_score_representations(text, expected):
    model = json.loads(bytes(train(trees=2, depth=2).save_raw("json")))
    model["learner"]["learner_model_param"]["base_score"] = text
    assert forest_from_model(json.dumps(model).encode()).base_score == np.float32(expected)


def test_unsupported_models_are_refused():
    x, y = candidate_rows(200), np.arange(200) % 3
    multiclass = xgboost.train({"objective": "multi:softprob", "num_class": 3, "nthread": 1},
                               xgboost.DMatrix(x, label=y), 2)
    with pytest.raises(UnsupportedModel, match="multi:softprob"):
        forest_from_booster(multiclass)
    linear = xgboost.train({"booster": "gblinear", "nthread": 1}, xgboost.DMatrix(x, label=y), 2)
    with pytest.raises(UnsupportedModel, match="gblinear"):
        forest_from_booster(linear)
    with pytest.raises(RejectedUpdate, match="cannot load"):
        load_booster(b"not a model")


@pytest.mark.parametrize("engine", available_engines())
def test_a_forest_of_single_leaves_equals_xgboost(engine):
    """Constant features allow no split: every tree is one leaf (a first model trained on too little variety)."""
    rng = np.random.default_rng(5)
    x = np.ones((200, 4), np.float32)
    booster = xgboost.train({"nthread": 1, "tree_method": "hist", "base_score": 1.5},
                            xgboost.DMatrix(x, label=rng.normal(2, 1, 200)), 50)
    forest = forest_from_booster(booster)
    query = np.concatenate([rng.normal(0, 5, (13, 4)), np.full((3, 4), np.nan)]).astype(np.float32)
    assert forest.depth == 1  # laid out with one level of splits that cannot matter
    np.testing.assert_array_equal(evaluate(ForestStack.of([forest]), query, engine)[0], booster.inplace_predict(query))


@pytest.mark.parametrize("text_nan", [False, True], ids=["json", "with-nan"])
def test_a_tree_without_its_fields_is_refused_by_name(text_nan):
    model = json.loads(bytes(train(trees=3, depth=2).save_raw("json")))
    trees = model["learner"]["gradient_booster"]["model"]["trees"]
    del trees[1]["split_conditions"]
    raw = json.dumps(model).encode()
    if text_nan:  # XGBoost writes NaN for such a value; the reader takes the slower path that accepts it
        trees[0]["base_weights"][0] = float("nan")
        raw = json.dumps(model).encode()
        assert b"NaN" in raw
    with pytest.raises(UnsupportedModel, match="split_conditions"):
        forest_from_model(raw)


def test_only_the_read_fields_of_a_tree_matter():
    booster = train(seed=5, trees=30, depth=5)
    model = json.loads(bytes(booster.save_raw("json")))
    for tree in model["learner"]["gradient_booster"]["model"]["trees"]:  # statistics the layout never reads
        tree["loss_changes"] = [0.0] * len(tree["loss_changes"])
        tree["sum_hessian"] = [1.0] * len(tree["sum_hessian"])
    changed = forest_from_model(json.dumps(model).encode())
    original = forest_from_booster(booster)
    np.testing.assert_array_equal(changed.leaves, original.leaves)
    np.testing.assert_array_equal(changed.thresholds, original.thresholds)
    np.testing.assert_array_equal(changed.features, original.features)
