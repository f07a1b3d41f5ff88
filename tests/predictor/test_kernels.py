"""The compiled walk (and the numpy reference) against XGBoost and the float32 semantics it must keep: exact
thresholds, signed zeros, infinities, missing values, batch sizes around the interleaving block, wide rows and split
batches; and arrays it cannot walk safely, refused."""

import numpy as np
import pytest

from headroom._native import Forests
from headroom.predictor.forest import Forest, forest_from_booster
from headroom.predictor.kernels import (
    CHUNK_ROWS,
    MIN_ROWS_PER_THREAD,
    ForestStack,
    available_engines,
    evaluate,
    order_keys,
)
from headroom.predictor.runtime import ModelRuntime
from tests.keys import TRUST
from tests.predictor.models import candidate_rows, train

SPECIAL = np.array([-np.inf, -3.4e38, -1.0, -1e-45, -0.0, 0.0, 1e-45, 1e-38, 1.0, np.nextafter(1.0, 2.0),
                    3.4e38, np.inf], dtype=np.float32)


def test_order_keys_keep_float32_order_and_equality():
    keys = order_keys(SPECIAL)
    for a, key_a in zip(SPECIAL, keys):
        for b, key_b in zip(SPECIAL, keys):
            assert (a < b) == (key_a < key_b), (a, b)
            assert (a == b) == (key_a == key_b), (a, b)


def stump(threshold: float, default_left: bool = True) -> Forest:
    """One depth-1 tree on feature 0: leaf 1.0 if x < threshold, else 2.0."""
    return Forest(objective="reg:squarederror", quantiles=(), n_features=1, base_score=np.float32(0.0), depth=1,
                  features=np.zeros((1, 1), np.uint32), thresholds=np.array([[threshold]], np.float32),
                  default_left=np.array([[default_left]]), leaves=np.array([[1.0, 2.0]], np.float32))


@pytest.mark.parametrize("engine", available_engines())
@pytest.mark.parametrize("threshold", [0.0, -0.0, 1.0, -1.0, 1e-45, np.inf, -np.inf],
                         ids=["zero", "negative-zero", "one", "minus-one", "subnormal", "inf", "minus-inf"])
def test_split_follows_float32_less_than(engine, threshold):
    values = SPECIAL[:, None]
    expected = np.where(values[:, 0] < np.float32(threshold), 1.0, 2.0).astype(np.float32)
    got = evaluate(ForestStack.of([stump(threshold)]), values, engine)[0]
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("engine", available_engines())
@pytest.mark.parametrize("default_left", [True, False], ids=["default-left", "default-right"])
def test_missing_value_follows_the_default_direction(engine, default_left):
    rows = np.array([[np.nan], [0.5], [-np.nan], [2.0]], np.float32)
    got = evaluate(ForestStack.of([stump(1.0, default_left)]), rows, engine)[0]
    missing = 1.0 if default_left else 2.0
    np.testing.assert_array_equal(got, np.array([missing, 1.0, missing, 2.0], np.float32))


@pytest.fixture(scope="module")
def boosters():
    return [train("ttft", seed=11, trees=60, depth=6), train("tpot", seed=12, trees=45, depth=4),
            train("ttft", "quantile", seed=13, trees=30, depth=6)]


@pytest.fixture(scope="module")
def stack(boosters):
    return ForestStack.of([forest_from_booster(b) for b in boosters])


def assert_equals_boosters(got: np.ndarray, boosters, rows: np.ndarray) -> None:
    assert got.shape == (len(boosters), len(rows))
    for index, booster in enumerate(boosters):
        np.testing.assert_allclose(got[index], booster.inplace_predict(rows), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 13, 100, 1001])
def test_every_batch_size_equals_xgboost(boosters, stack, n):
    rows = candidate_rows(n, seed=n)
    for engine in available_engines():
        assert_equals_boosters(evaluate(stack, rows, engine), boosters, rows)


def test_rows_on_every_threshold_and_with_missing_values_equal_xgboost(boosters, stack):
    rows = candidate_rows(400, seed=21)
    forest = stack.forests[0]
    splits = np.isfinite(forest.thresholds)
    for row, (feature, threshold) in enumerate(zip(forest.features[splits], forest.thresholds[splits])):
        rows[row % len(rows), feature] = threshold  # exactly on a split: must go right
    assert_equals_boosters(evaluate(stack, rows), boosters, rows)
    rows[::7, 3] = np.nan
    rows[::11, 0] = np.nan
    assert_equals_boosters(evaluate(stack, rows), boosters, rows)


def test_a_missing_value_in_one_chunk_of_a_large_batch_equals_xgboost(boosters, stack):
    rows = candidate_rows(2 * CHUNK_ROWS + 7, seed=22)
    rows[CHUNK_ROWS + 3, 0] = np.nan  # only the middle chunk takes the careful walk
    assert_equals_boosters(evaluate(stack, rows), boosters, rows)


@pytest.mark.parametrize("n", [3, 8, 20, 97])  # part of a block of interleaved rows, one, several
def test_compiled_and_numpy_engines_agree_bit_for_bit(stack, n):
    rows = candidate_rows(n, seed=5)
    rows[::5, 1] = -0.0
    rows[::9, 2] = np.inf
    np.testing.assert_array_equal(evaluate(stack, rows, "native"), evaluate(stack, rows, "numpy"))
    rows[::13, 4] = np.nan
    np.testing.assert_array_equal(evaluate(stack, rows, "native"), evaluate(stack, rows, "numpy"))


def test_rows_wider_than_the_model_use_only_its_features(stack):
    rows = candidate_rows(37, seed=6)
    wide = np.hstack([rows, np.full((len(rows), 3), 1e9, np.float32)])
    np.testing.assert_array_equal(evaluate(stack, wide), evaluate(stack, rows))


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("missing", [False, True], ids=["finite", "with-nan"])
def test_split_batches_equal_one_thread_bit_for_bit(stack, threads, missing):
    rows = candidate_rows(threads * MIN_ROWS_PER_THREAD + 5, seed=threads)
    if missing:
        rows[::17, 5] = np.nan
    np.testing.assert_array_equal(evaluate(stack, rows, threads=threads), evaluate(stack, rows, threads=1))


def test_runtime_refuses_fewer_than_one_thread():
    with pytest.raises(ValueError, match="at least 1, got 0"):
        ModelRuntime(trust=TRUST, threads=0)


def test_the_compiled_walk_refuses_arrays_it_cannot_walk_safely(stack):
    forest = stump(1.0)
    words, left = np.zeros(2, np.uint64), np.ones(2, np.uint8)
    one = (np.zeros(1, np.uint64), np.zeros(1, np.uint64), np.array([0, 1], np.int64), np.ones(1, np.int64),
           np.zeros(1, np.float32))
    Forests(words, left, forest.leaves.ravel(), *one)  # a stump: two node slots, two leaves
    with pytest.raises(ValueError, match="a tree beyond its arrays"):
        Forests(words, left, np.zeros(1, np.float32), *one)  # one leaf short
    with pytest.raises(ValueError, match="tree ranges or depths"):
        Forests(words, left, forest.leaves.ravel(), *one[:2], np.array([0, 2], np.int64), *one[3:])
    with pytest.raises(ValueError, match="array lengths"):
        Forests(words, np.ones(3, np.uint8), forest.leaves.ravel(), *one)
    with pytest.raises(ValueError, match="nodes:"):
        Forests(words.astype(np.float64), left, forest.leaves.ravel(), *one)
    rows = candidate_rows(9, seed=1)
    out = np.empty((len(stack.forests), len(rows)), np.float32)
    with pytest.raises(ValueError, match="the forests read"):
        stack.compiled.predict(rows[:, :2].copy().view(np.uint32), 2, out[:, :9], 0, 9)
    with pytest.raises(ValueError, match="out must be writable float32"):
        stack.compiled.predict(rows.view(np.uint32), rows.shape[1], out[:1].copy(), 0, 9)
    with pytest.raises(ValueError, match="rows 0..10"):
        stack.compiled.predict(rows.view(np.uint32), rows.shape[1], out, 0, 10)
