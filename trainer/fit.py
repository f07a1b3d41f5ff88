"""Fitting: one pure function from samples and hyperparameters to an XGBoost booster.

A booster trained on a transformed target carries the transform as an attribute in its own bytes
(:data:`contract.model_update.TRANSFORM_ATTRIBUTE`), so :func:`predict` always answers in milliseconds,
whether the booster was just fitted or loaded back from a model-update message.

:func:`fit` runs XGBoost's boosting rounds itself, one ``Booster.update`` per tree, on a matrix without
feature names (the names are set on the booster afterwards): ``xgboost.train`` checks the matrix's feature
names against the booster's and runs its callbacks on every round, which costs about a fifth of a fit on a
window of a few thousand rows and changes nothing in the model (the same bytes; ``tests/trainer/test_fit.py``).
"""


from __future__ import annotations

import numpy as np
import xgboost as xgb

from headroom.contract.features import FEATURE_NAMES, training_features
from headroom.contract.model_update import TRANSFORM_ATTRIBUTE, booster_transform, to_milliseconds
from headroom.trainer.evaluation import MAPE_FLOOR_MS
from headroom.trainer.params import TrainParams
from headroom.trainer.samples import Samples

LOG_FLOOR_MS = MAPE_FLOOR_MS  # a log target counts observations below this as this much, as MAPE does


def fit(samples: Samples, params: TrainParams, target: str | None = None) -> xgb.Booster:
    """Train a booster on ``samples`` (a :class:`trainer.samples.Samples`) for ``target``'s models, blind to the
    features they do not read (:func:`contract.features.training_features`); deterministic for a seed."""
    if len(samples) == 0:
        raise ValueError("cannot fit a model on an empty sample")
    matrix = xgb.DMatrix(training_features(samples.features(), target),
                         label=training_target(samples.values, params.target_transform), nthread=params.threads)
    booster = xgb.Booster(params.booster_params(), [matrix])
    for iteration in range(params.n_trees):
        booster.update(matrix, iteration)
    booster.reset()  # the training caches go with the matrix
    booster.feature_names = list(FEATURE_NAMES)
    booster.set_attr(**{TRANSFORM_ATTRIBUTE: params.target_transform})
    return booster


def training_target(values_ms: np.ndarray, transform: str) -> np.ndarray:
    """Observed latencies (ms) as the model learns them under ``transform``."""
    if transform == "log":
        logged: np.ndarray = np.log(np.maximum(values_ms, LOG_FLOOR_MS))
        return logged
    return values_ms


def predict(booster: xgb.Booster, features: np.ndarray) -> np.ndarray:
    """Predictions in milliseconds for a feature matrix from :func:`contract.features.feature_matrix`."""
    raw = booster.predict(xgb.DMatrix(features, feature_names=list(FEATURE_NAMES)))
    return to_milliseconds(raw, booster_transform(booster))


def model_bytes(booster: xgb.Booster) -> bytes:
    """The booster in XGBoost's own UBJ format (what model-update messages carry)."""
    return bytes(booster.save_raw(raw_format="ubj"))
