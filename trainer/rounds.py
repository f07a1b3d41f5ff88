"""One training round for a (pool key, target): split, fit each objective, gate against live, make updates.

Quantile models are calibrated on the newest training rows (:mod:`trainer.calibration`) before the gate
judges them on the holdout, which calibration never sees. A promoted candidate is then refitted on all
rows, holdout included, and that model is published with the candidate's holdout metrics: the holdout
holds the newest rows, the ones that best describe the traffic the model will see next. As a live model
may thus have trained on rows of a later holdout, the gate compares candidate and live version on the
holdout rows newer than the live version's window (when there are at least ``MIN_GATE_ROWS``; else on
the whole holdout, which favours the live version).

The fits of a round on the same rows (the mean and quantile candidates on the training rows; their refits on
all rows) share one training matrix (:class:`trainer.fit.Matrices`): the same models, built once.

Pure apart from CPU time: it reads the live models and returns outcomes; publishing them and making
them live is the caller's job.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import xgboost as xgb

from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.model_update import ModelUpdate, make_update, model_key
from headroom.trainer.calibration import fit_calibrated_quantile
from headroom.trainer.evaluation import HoldoutMetrics, score
from headroom.trainer.fit import Matrices, fit, model_bytes, predict
from headroom.trainer.gate import GateDecision, decide
from headroom.trainer.holdout import split
from headroom.trainer.live import LiveModels
from headroom.trainer.params import TrainParams
from headroom.trainer.samples import Samples

MIN_GATE_ROWS = 20  # fewest holdout rows newer than the live version's window for the gate to judge on them


@dataclass(frozen=True)
class RoundSpec:
    holdout_fraction: float = 0.2
    tolerance: float = 0.02  # relative slack at the promotion gate
    calibration_fraction: float = 0.25  # newest share of training rows that calibrates quantile models (0: off)
    refit_promoted: bool = True  # publish a promoted candidate refitted on train + holdout rows


@dataclass(frozen=True)
class RoundOutcome:
    key: str
    objective: str
    decision: GateDecision
    candidate: HoldoutMetrics  # on the whole holdout (what the update publishes)
    live: HoldoutMetrics | None  # the live version's, on the rows the gate compared
    live_version: int | None
    update: ModelUpdate | None  # set when promoted
    booster: xgb.Booster | None  # the candidate when promoted
    train_rows: int
    fit_seconds: float  # fitting the candidate, and refitting it when promoted


def train_round(pool_key: str, target: str, samples: Samples, live: LiveModels,
                params: Sequence[TrainParams], spec: RoundSpec, *, now: float,
                drift_reason: str | None = None) -> list[RoundOutcome]:
    """Train one candidate per entry of ``params`` and decide on each; ``now`` stamps the updates."""
    train, holdout = split(samples, spec.holdout_fraction)
    if len(train) == 0:
        raise ValueError(f"no training rows for {pool_key}/{target} out of {len(samples)} samples")
    holdout_features = holdout.features()
    window_stats = {**samples.stats(), "train_rows": len(train), "holdout_rows": len(holdout)}
    matrices = Matrices(target)
    outcomes = []
    for p in params:
        started = time.perf_counter()
        booster, stats = _fit(train, matrices, p, spec, window_stats)
        seconds = time.perf_counter() - started
        predicted = predict(booster, holdout_features)
        candidate = score(holdout.values, predicted, p.quantile)
        held = live.get(pool_key, target, p.objective)
        live_metrics, compared = None, candidate
        if held is not None and held.booster is not None:
            rows = _unseen_by(held.update, holdout.times)
            compared = score(holdout.values[rows], predicted[rows], p.quantile)
            live_metrics = score(holdout.values[rows], predict(held.booster, holdout_features[rows]), p.quantile)
        decision = decide(compared, live_metrics, p.objective, spec.tolerance)
        update = None
        if decision.promote:
            if spec.refit_promoted:
                started = time.perf_counter()
                booster, stats = _fit(samples, matrices, p, spec, {**window_stats, "refit_rows": len(samples)})
                seconds += time.perf_counter() - started
            update = make_update(
                model=model_bytes(booster), version=live.next_version(pool_key, target, p.objective),
                pool_key=pool_key, target=target, objective=p.objective, feature_schema=FEATURE_SCHEMA,
                model_format="ubj", created_at=now,
                quantile=p.quantile if p.objective == "quantile" else None,
                window_stats=stats, holdout_metrics=_finite(candidate.as_dict()),
                drift_reason=drift_reason, output_transform=p.target_transform)
        outcomes.append(RoundOutcome(
            key=model_key(pool_key, target, p.objective), objective=p.objective, decision=decision,
            candidate=candidate, live=live_metrics, live_version=None if held is None else held.version,
            update=update, booster=booster if update else None, train_rows=len(train), fit_seconds=seconds))
    return outcomes


def _unseen_by(update: ModelUpdate, times: np.ndarray) -> np.ndarray:
    """Holdout rows newer than everything ``update`` was trained on; all rows when too few are."""
    newest = update.window_stats.get("newest_ts")
    fresh = times > newest if isinstance(newest, (int, float)) else np.ones(len(times), dtype=bool)
    return fresh if fresh.sum() >= MIN_GATE_ROWS else np.ones(len(times), dtype=bool)


def _fit(rows: Samples, matrices: Matrices, p: TrainParams, spec: RoundSpec,
         stats: dict[str, Any]) -> tuple[xgb.Booster, dict[str, Any]]:
    """A booster for ``p`` on ``rows`` (quantile models calibrated), and the window stats to publish."""
    if p.objective == "quantile" and spec.calibration_fraction > 0:
        calibrated = fit_calibrated_quantile(rows, p, spec.calibration_fraction, matrices.target, matrices)
        return calibrated.booster, {**stats, "calibration_rows": calibrated.rows,
                                    "calibration_shift": calibrated.shift}
    return fit(rows, p, matrices.target, matrices), stats


def _finite(metrics: dict[str, float]) -> dict[str, float]:
    """Metrics without NaN entries (the wire format is strict JSON)."""
    return {k: v for k, v in metrics.items() if v == v}
