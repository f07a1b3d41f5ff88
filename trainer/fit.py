"""Fitting: one pure function from samples and hyperparameters to an XGBoost booster.

A booster trained on a transformed target carries the transform as an attribute in its own bytes
(:data:`contract.model_update.TRANSFORM_ATTRIBUTE`), so :func:`predict` always answers in milliseconds,
whether the booster was just fitted or loaded back from a model-update message.

:func:`fit` runs XGBoost's boosting rounds itself, one ``XGBoosterUpdateOneIter`` per tree, on a matrix without
feature names (the names are set on the booster afterwards): ``xgboost.train``, and ``Booster.update`` under it,
read and check the matrix's feature names and types on every round, which costs a fifth to a third of a fit on
a window of a few thousand rows and changes nothing in the model (the same bytes; ``tests/trainer/test_fit.py``).
The booster keeps its training caches (``Booster.reset`` would cost about a tenth of a fit): a prediction
and a gradient per training row, a few per cent of its trees' memory.

Fits on the same rows share one matrix (:class:`Matrices`), and with it XGBoost's quantile sketch of those rows,
made on the first tree of the first fit. Every matrix is built with one thread, as the fits run: XGBoost's
default of every core costs more CPU time in waiting threads than building a window's matrix does.
"""


from __future__ import annotations

import ctypes

import numpy as np
import xgboost as xgb
from xgboost.core import _LIB, _check_call

from headroom.contract import probe
from headroom.contract.features import FEATURE_NAMES, training_features
from headroom.contract.model_update import TRANSFORM_ATTRIBUTE, booster_transform, to_milliseconds
from headroom.trainer.evaluation import MAPE_FLOOR_MS
from headroom.trainer.params import TrainParams
from headroom.trainer.samples import Samples

LOG_FLOOR_MS = MAPE_FLOOR_MS  # a log target counts observations below this as this much, as MAPE does


MATRIX_THREADS = 1  # threads building a matrix to fit or predict on (see the module docstring)


class Matrices:
    """The training matrix of each row set a round fits on, built once for ``target``'s models: the matrix of
    ``samples`` is shared for as long as this object holds it (it keeps ``samples`` alive, so their identity
    names them)."""

    def __init__(self, target: str | None = None):
        self.target = target
        self._built: dict[tuple[int, str], tuple[Samples, xgb.DMatrix]] = {}

    def of(self, samples: Samples, params: TrainParams) -> xgb.DMatrix:
        """The matrix ``params``' models of ``target`` train on: ``samples``' features, blind to those the
        models do not read (:func:`contract.features.training_features`), and their target under ``params``'
        transform, without feature names."""
        if len(samples) == 0:
            raise ValueError("cannot fit a model on an empty sample")
        key = (id(samples), params.target_transform)
        if key not in self._built:
            matrix = xgb.DMatrix(training_features(samples.features(), self.target),
                                 label=training_target(samples.values, params.target_transform),
                                 nthread=MATRIX_THREADS)
            self._built[key] = (samples, matrix)
        return self._built[key][1]


def fit(samples: Samples, params: TrainParams, target: str | None = None,
        matrices: Matrices | None = None) -> xgb.Booster:
    """Train a booster on ``samples`` (a :class:`trainer.samples.Samples`) for ``target``'s models, blind to the
    features they do not read; deterministic for a seed. With ``matrices`` (made for ``target``), on the matrix
    they hold for ``samples``: the same model, without building the matrix and its sketch again."""
    if matrices is not None and matrices.target != target:
        raise ValueError(f"matrices made for target {matrices.target!r} cannot fit {target!r} models")
    matrix = (matrices or Matrices(target)).of(samples, params)
    booster = xgb.Booster(params.booster_params(), [matrix])
    for iteration in range(params.n_trees):  # Booster.update, without its checks of the matrix's features
        _check_call(_LIB.XGBoosterUpdateOneIter(booster.handle, ctypes.c_int(iteration), matrix.handle))
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
    return to_milliseconds(raw_output(booster, features), booster_transform(booster))


def raw_output(booster: xgb.Booster, features: np.ndarray) -> np.ndarray:
    """The booster's output before its transform (log milliseconds for a log target)."""
    return booster.predict(xgb.DMatrix(features, feature_names=list(FEATURE_NAMES), nthread=MATRIX_THREADS))


def model_bytes(booster: xgb.Booster) -> bytes:
    """The booster in XGBoost's own UBJ format (what model-update messages carry), with its outputs on the probe
    rows (:func:`contract.probe.stamp`) for the readers that walk its trees without XGBoost."""
    probe.stamp(booster)
    return bytes(booster.save_raw(raw_format="ubj"))
