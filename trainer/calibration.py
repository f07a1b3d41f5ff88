"""Calibrating a quantile model so that it covers its quantile on data it was not fitted on.

A quantile booster covers about its quantile of the rows it was fitted on, but less of newer data: it
overfits noisy rows, and latency drifts with load. Split conformal calibration fixes the first and
follows the second: a probe booster is fitted on the older rows of the training set, the
``quantile``-th conformal quantile of its residuals on the newest rows (in the model's own units, so
log milliseconds for a log target) is the shift, and the booster fitted on *all* training rows gets its
intercept moved by that shift. The result is still one XGBoost model whose output every consumer reads
unchanged; only its ``base_score`` differs.

>>> conformal_shift(np.array([-1.0, 0.0, 1.0, 2.0]), quantile=0.5)
1.0
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import xgboost as xgb

from headroom.trainer.fit import Matrices, fit, raw_output, training_target
from headroom.trainer.params import TrainParams
from headroom.trainer.samples import Samples

MIN_CALIBRATION_ROWS = 20  # fewer newest rows than this: no calibration (shift 0)


@dataclass(frozen=True)
class Calibrated:
    booster: xgb.Booster
    shift: float  # added to the model's raw output (log ms for a log target, ms otherwise)
    rows: int  # newest training rows the shift was measured on (0: not calibrated)


def fit_calibrated_quantile(samples: Samples, params: TrainParams, fraction: float,
                            target: str | None = None, matrices: Matrices | None = None) -> Calibrated:
    """A quantile booster on all of ``samples`` (on the matrix ``matrices`` hold for them, if given) whose
    intercept is shifted to cover ``params.quantile`` of the newest ``fraction`` of them, as judged by a probe
    fitted on the rest."""
    if params.objective != "quantile":
        raise ValueError(f"only quantile models are calibrated, got objective {params.objective!r}")
    booster = fit(samples, params, target, matrices)
    older, newer = newest_split(samples, fraction)
    if len(newer) < MIN_CALIBRATION_ROWS or len(older) == 0:
        return Calibrated(booster, 0.0, 0)
    probe = fit(older, params, target)
    residuals = training_target(newer.values, params.target_transform) - raw_output(probe, newer.features())
    shift = conformal_shift(residuals, params.quantile)
    return Calibrated(shifted(booster, shift), shift, len(newer))


def newest_split(samples: Samples, fraction: float) -> tuple[Samples, Samples]:
    """``(older, newest)``: the newest ``fraction`` of the rows by completion time, and the rest."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"calibration fraction must be within [0, 1), got {fraction}")
    order = np.argsort(samples.times, kind="stable")
    cut = len(order) - round(fraction * len(order))
    return samples.take(order[:cut]), samples.take(order[cut:])


def conformal_shift(residuals: np.ndarray, quantile: float) -> float:
    """The split-conformal ``quantile`` of ``residuals`` (observed − predicted): the ⌈(n+1)·q⌉-th smallest."""
    ordered = np.sort(np.asarray(residuals, dtype=np.float64))
    if len(ordered) == 0:
        raise ValueError("no residuals to calibrate on")
    rank = min(len(ordered), math.ceil((len(ordered) + 1) * quantile))
    return float(ordered[rank - 1])


def shifted(booster: xgb.Booster, shift: float) -> xgb.Booster:
    """``booster`` (changed in place and returned) with ``shift`` added to every raw output."""
    params = json.loads(booster.save_config())["learner"]["learner_model_param"]
    intercept = float(str(params["base_score"]).strip("[]"))
    booster.set_param({"base_score": intercept + shift})
    return booster

