"""One training round for a (pool key, target): split, fit each objective, gate against live, make updates.

Pure apart from CPU time: it reads the live models and returns outcomes; publishing them and making
them live is the caller's job.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from contract.features import FEATURE_SCHEMA
from contract.model_update import ModelUpdate, make_update, model_key
from trainer.evaluation import HoldoutMetrics, score
from trainer.fit import fit, model_bytes, predict
from trainer.gate import GateDecision, decide
from trainer.holdout import split
from trainer.live import LiveModels
from trainer.params import TrainParams
from trainer.samples import Samples


@dataclass(frozen=True)
class RoundSpec:
    holdout_fraction: float = 0.2
    tolerance: float = 0.02  # relative slack at the promotion gate


@dataclass(frozen=True)
class RoundOutcome:
    key: str
    objective: str
    decision: GateDecision
    candidate: HoldoutMetrics
    live: HoldoutMetrics | None
    live_version: int | None
    update: ModelUpdate | None  # set when promoted
    booster: object | None  # the candidate's xgboost.Booster when promoted
    train_rows: int
    fit_seconds: float


def train_round(pool_key: str, target: str, samples: Samples, live: LiveModels,
                params: Sequence[TrainParams], spec: RoundSpec, *, now: float,
                drift_reason: str | None = None) -> list[RoundOutcome]:
    """Train one candidate per entry of ``params`` and decide on each; ``now`` stamps the updates."""
    train, holdout = split(samples, spec.holdout_fraction)
    if len(train) == 0:
        raise ValueError(f"no training rows for {pool_key}/{target} out of {len(samples)} samples")
    holdout_features = holdout.features()
    window_stats = {**samples.stats(), "train_rows": len(train), "holdout_rows": len(holdout)}
    outcomes = []
    for p in params:
        started = time.perf_counter()
        booster = fit(train, p)
        seconds = time.perf_counter() - started
        candidate = score(holdout.values, predict(booster, holdout_features), p.quantile)
        held = live.get(pool_key, target, p.objective)
        live_metrics = None
        if held is not None and held.booster is not None:
            live_metrics = score(holdout.values, predict(held.booster, holdout_features), p.quantile)
        decision = decide(candidate, live_metrics, p.objective, spec.tolerance)
        update = None
        if decision.promote:
            update = make_update(
                model=model_bytes(booster), version=live.next_version(pool_key, target, p.objective),
                pool_key=pool_key, target=target, objective=p.objective, feature_schema=FEATURE_SCHEMA,
                model_format="ubj", created_at=now,
                quantile=p.quantile if p.objective == "quantile" else None,
                window_stats=window_stats, holdout_metrics=_finite(candidate.as_dict()),
                drift_reason=drift_reason)
        outcomes.append(RoundOutcome(
            key=model_key(pool_key, target, p.objective), objective=p.objective, decision=decision,
            candidate=candidate, live=live_metrics, live_version=None if held is None else held.version,
            update=update, booster=booster if update else None, train_rows=len(train), fit_seconds=seconds))
    return outcomes


def _finite(metrics: dict[str, float]) -> dict[str, float]:
    """Metrics without NaN entries (the wire format is strict JSON)."""
    return {k: v for k, v in metrics.items() if v == v}
