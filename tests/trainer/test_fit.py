import dataclasses

import numpy as np
import pytest
import xgboost

from headroom.contract.features import FEATURE_NAMES, RAW_COLUMNS, training_features, unread_columns
from headroom.contract.model_update import TRANSFORM_ATTRIBUTE, booster_transform, load_booster
from headroom.contract.probe import PROBE_ROWS, stamped
from headroom.predictor.forest import forest_from_model
from headroom.predictor.kernels import ForestStack, evaluate
from headroom.trainer.evaluation import score
from headroom.trainer.fit import fit, model_bytes, predict, training_target
from headroom.trainer.params import TrainParams
from tests.trainer.synthetic import samples_of, synthetic_records

FAST = TrainParams(n_trees=60)


@pytest.fixture(scope="module")
def data():
    records = synthetic_records(3000, seed=11)
    return samples_of(records[:2400], "ttft"), samples_of(records[2400:], "ttft")


def test_mean_model_learns_the_latency_function(data):
    train, test = data
    metrics = score(test.values, predict(fit(train, FAST), test.features()))
    assert metrics.mape < 0.15


def test_quantile_model_covers_about_its_quantile(data):
    train, test = data
    params = TrainParams(objective="quantile", quantile=0.9, n_trees=100)
    metrics = score(test.values, predict(fit(train, params), test.features()), 0.9)
    assert 0.8 <= metrics.coverage <= 0.97
    mean_metrics = score(test.values, predict(fit(train, FAST), test.features()), 0.9)
    assert metrics.coverage > mean_metrics.coverage


def test_fit_is_deterministic_and_round_trips_through_ubj(data):
    train, test = data
    first, second = fit(train, FAST), fit(train, FAST)
    assert model_bytes(first) == model_bytes(second)
    loaded = load_booster(model_bytes(first))
    np.testing.assert_array_equal(predict(loaded, test.features()), predict(first, test.features()))


def test_the_model_bytes_carry_xgboost_s_outputs_on_the_probe_rows(data):
    booster = fit(data[0], FAST)
    forest = forest_from_model(model_bytes(booster))
    np.testing.assert_array_equal(stamped(forest.attributes), booster.inplace_predict(PROBE_ROWS).astype(np.float32))
    np.testing.assert_allclose(evaluate(ForestStack.of([forest]), PROBE_ROWS)[0], stamped(forest.attributes),
                               rtol=1e-6)


def test_reference_hyperparameters_are_the_defaults():
    params = TrainParams().booster_params()
    assert TrainParams().n_trees == 200
    assert {k: params[k] for k in ("max_depth", "eta", "subsample", "colsample_bytree", "min_child_weight",
                                   "gamma", "alpha", "lambda", "tree_method", "objective")} == {
        "max_depth": 6, "eta": 0.05, "subsample": 0.8, "colsample_bytree": 0.8, "min_child_weight": 5.0,
        "gamma": 0.2, "alpha": 0.01, "lambda": 0.1, "tree_method": "hist", "objective": "reg:squarederror"}
    assert TrainParams().target_transform == "log"  # headroom's departure from the reference: see trainer.params


@pytest.mark.parametrize(("changes", "message"), [
    pytest.param({"objective": "median"}, "objective 'median'", id="objective"),
    pytest.param({"quantile": 1.0}, "quantile must be", id="quantile"),
    pytest.param({"n_trees": 0}, "must be positive", id="trees"),
])
def test_params_reject_nonsense(changes, message):
    with pytest.raises(ValueError, match=message):
        TrainParams(**changes)


def test_fit_refuses_empty_samples(data):
    train, _ = data
    with pytest.raises(ValueError, match="empty"):
        fit(train.take(np.zeros(len(train), dtype=bool)), FAST)


def test_log_target_model_answers_in_milliseconds_and_carries_its_transform(data):
    train, test = data
    logged, plain = fit(train, FAST), fit(train, dataclasses.replace(FAST, target_transform="identity"))
    assert booster_transform(logged) == "log" and booster_transform(plain) == "identity"
    assert booster_transform(load_booster(model_bytes(logged))) == "log"
    raw = logged.predict(xgboost.DMatrix(test.features(), feature_names=list(FEATURE_NAMES)))
    assert raw.max() < np.log(test.values.max()) + 1.0  # the trees learned log milliseconds ...
    predicted = predict(load_booster(model_bytes(logged)), test.features())
    np.testing.assert_allclose(predicted, np.exp(raw), rtol=1e-6)  # ... and predict() answers in milliseconds
    assert (predicted > 0).all()
    log_mape = score(test.values, predicted).mape
    assert log_mape < 0.15
    assert log_mape <= score(test.values, predict(plain, test.features())).mape * 1.1


def test_log_target_is_floored_at_the_mape_floor():
    np.testing.assert_allclose(training_target(np.array([0.0, 0.5, 1.0, 250.0]), "log"),
                               [0.0, 0.0, 0.0, np.log(250.0)])
    np.testing.assert_array_equal(training_target(np.array([0.0, 250.0]), "identity"), [0.0, 250.0])


def test_params_reject_an_unknown_target_transform():
    with pytest.raises(ValueError, match="target transform 'sqrt'"):
        TrainParams(target_transform="sqrt")


def test_a_central_loss_is_squared_by_default_absolute_on_request_and_nothing_else():
    assert TrainParams().booster_params()["objective"] == "reg:squarederror"
    assert TrainParams(central_loss="absolute").booster_params()["objective"] == "reg:absoluteerror"
    assert TrainParams(objective="quantile", central_loss="absolute").booster_params()["objective"] == \
        "reg:quantileerror"
    with pytest.raises(ValueError, match="central loss 'cubic'"):
        TrainParams(central_loss="cubic")


def test_a_model_never_splits_on_the_features_its_target_does_not_read(data):
    train, _ = data
    encoder = RAW_COLUMNS.index("encoder_input_size")
    raw = train.raw.copy()
    raw[:, encoder] = np.random.default_rng(3).integers(0, 8, len(raw))  # the TTFT of these rows grows with it
    loud = dataclasses.replace(train, raw=raw, values=train.values + 300.0 * raw[:, encoder])
    used = {target: fit(loud, FAST, target).get_score(importance_type="weight") for target in ("ttft", "tpot")}
    assert "encoder_input_size" in used["ttft"] and "encoder_input_size" not in used["tpot"]
    assert unread_columns("tpot") == (RAW_COLUMNS.index("encoder_matched_size"), encoder)
    assert unread_columns("ttft") == unread_columns("e2e") == ()


@pytest.mark.parametrize("params", [FAST, TrainParams(objective="quantile", n_trees=40, target_transform="identity")],
                         ids=["mean-log", "quantile-identity"])
def test_fit_makes_the_model_xgboost_train_makes(data, params):
    train, _ = data
    matrix = xgboost.DMatrix(training_features(train.features(), "ttft"),
                             label=training_target(train.values, params.target_transform),
                             feature_names=list(FEATURE_NAMES))
    reference = xgboost.train(params.booster_params(), matrix, num_boost_round=params.n_trees)
    reference.set_attr(**{TRANSFORM_ATTRIBUTE: params.target_transform})
    assert model_bytes(fit(train, params, "ttft")) == model_bytes(reference)
