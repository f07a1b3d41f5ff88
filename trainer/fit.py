"""Fitting: one pure function from samples and hyperparameters to an XGBoost booster."""

from __future__ import annotations

import numpy as np
import xgboost as xgb

from contract.features import FEATURE_NAMES
from trainer.params import TrainParams
from trainer.samples import Samples


def fit(samples: Samples, params: TrainParams) -> xgb.Booster:
    """Train a booster on ``samples`` (a :class:`trainer.samples.Samples`); deterministic for a seed."""
    if len(samples) == 0:
        raise ValueError("cannot fit a model on an empty sample")
    matrix = xgb.DMatrix(samples.features(), label=samples.values, feature_names=list(FEATURE_NAMES))
    return xgb.train(params.booster_params(), matrix, num_boost_round=params.n_trees)


def predict(booster: xgb.Booster, features: np.ndarray) -> np.ndarray:
    """Predictions for a feature matrix from :func:`contract.features.feature_matrix`."""
    return booster.predict(xgb.DMatrix(features, feature_names=list(FEATURE_NAMES)))


def model_bytes(booster: xgb.Booster) -> bytes:
    """The booster in XGBoost's own UBJ format (what model-update messages carry)."""
    return bytes(booster.save_raw(raw_format="ubj"))


def load_booster(raw: bytes) -> xgb.Booster:
    """A booster from XGBoost JSON or UBJ bytes."""
    booster = xgb.Booster()
    booster.load_model(bytearray(raw))
    return booster
