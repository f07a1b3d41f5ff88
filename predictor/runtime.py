"""The model runtime: the live model version per (pool key, target, objective), and batched prediction.

:meth:`ModelRuntime.apply` takes a raw model-update message and swaps it in only after it passes every
check: a signature by a trusted key and the checksum (:func:`contract.model_update.decode_update` with the
runtime's :class:`~contract.signing.TrustedKeys`), a version newer than the live one and not too far ahead
of it (:func:`contract.model_update.refusal`), the feature schema, that its trees are supported (read without
XGBoost, :func:`predictor.forest.forest_from_model`) and within the trust's
:class:`~contract.model_update.ModelBounds` (trees, depth, every leaf and split a finite number, and every output
the trees can add up to finite in milliseconds, after the output transform), its output transform and objective
match the message, and a probe prediction that must be finite, non-negative (in milliseconds, after the output
transform) and equal to XGBoost's own: the outputs its trainer stored in the model (:mod:`contract.probe`), or,
for a model without them, XGBoost's here (imported for such a model only). A failing update is
rejected, counted by reason (``unsigned``, ``unknown-key``, ``bad-signature``, ``replayed`` for a version
older than the live one, ``version``, ``checksum``, ``bytes``, ``trees``, ``depth``, ``leaf``, ``range``,
``schema``, ``probe``, ...) and logged, and the previous version keeps serving; the live version itself arriving again is ignored (stale), so replaying the topic is
harmless.

Each pool's models are held in one immutable snapshot whose trees are stacked for a single-pass
evaluation (the outputs of models trained on log latency are exponentiated after it); an update builds a
new snapshot and replaces the reference, so a concurrent :meth:`ModelRuntime.predict` sees either the old
or the new set, never a mix.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from headroom.contract.features import FEATURE_NAMES
from headroom.contract.model_update import (
    MAX_VERSION_JUMP,
    STALE,
    InvalidUpdate,
    ModelUpdate,
    RejectedUpdate,
    check_schema,
    check_transform,
    decode_update,
    load_booster,
    model_key,
    refusal,
    to_milliseconds,
)
from headroom.contract.probe import PROBE_ROWS, stamped
from headroom.contract.signing import TrustedKeys
from headroom.predictor.errors import InvalidBatch, NotReady, UnknownPool
from headroom.predictor.forest import Forest, ModelOutOfBounds, UnsupportedModel, forest_from_model
from headroom.predictor.kernels import ForestStack, available_engines, default_engine, evaluate

log = logging.getLogger(__name__)

PROBE_RTOL = 1e-5  # evaluator vs XGBoost on the probe rows, relative to the prediction's magnitude


class ApplyOutcome(Enum):
    APPLIED = "applied"
    STALE = "stale"  # not newer than the live version: ignored
    REJECTED = "rejected"


@dataclass(frozen=True)
class ApplyResult:
    outcome: ApplyOutcome
    key: str | None = None
    version: int | None = None
    reason: str | None = None  # rejection category, e.g. "checksum", "schema", "probe"
    detail: str | None = None


@dataclass(frozen=True)
class ServingModel:
    """A model version that passed every check, with the metadata it was published with."""

    pool_key: str
    target: str
    objective: str
    quantile: float | None
    version: int
    created_at: float
    applied_at: float
    holdout_metrics: dict[str, float] = field(repr=False)
    forest: Forest = field(repr=False)
    output_transform: str = "identity"  # raw tree output -> milliseconds (contract.model_update)
    signer: str | None = None  # id of the key the update was signed with (None: unsigned, and allowed)

    @property
    def key(self) -> str:
        return model_key(self.pool_key, self.target, self.objective)


@dataclass(frozen=True)
class PoolModels:
    """One pool's live models, sorted by (target, objective), with their trees stacked."""

    pool_key: str
    models: tuple[ServingModel, ...]
    stack: ForestStack = field(repr=False)
    logged: tuple[int, ...] = ()  # indices of the models whose raw output is a log of milliseconds

    @classmethod
    def of(cls, pool_key: str, models: list[ServingModel]) -> PoolModels:
        ordered = tuple(sorted(models, key=lambda m: (m.target, m.objective)))
        logged = tuple(i for i, m in enumerate(ordered) if m.output_transform == "log")
        return cls(pool_key, ordered, ForestStack.of([m.forest for m in ordered]), logged)

    def to_milliseconds(self, values: np.ndarray) -> None:
        """Map the raw outputs ``values`` (one float32 row per model) to milliseconds, in place."""
        if len(self.logged) == len(self.models):
            np.exp(values, out=values)
        else:
            for index in self.logged:
                np.exp(values[index], out=values[index])


@dataclass(frozen=True)
class PoolPrediction:
    """Predictions in milliseconds for each row, one float32 array per model of the pool."""

    pool_key: str
    models: tuple[ServingModel, ...]
    values: np.ndarray = field(repr=False)  # (len(models), n_rows) float32

    def get(self, target: str, objective: str = "mean") -> np.ndarray | None:
        for index, model in enumerate(self.models):
            if model.target == target and model.objective == objective:
                values: np.ndarray = self.values[index]
                return values
        return None


class ModelRuntime:
    """Holds and serves the live model versions, from updates signed by a key of ``trust``; safe to use from
    many threads."""

    def __init__(self, *, trust: TrustedKeys, engine: str | None = None, clock: Callable[[], float] = time.time, threads: int = 1,
                 max_version_jump: int = MAX_VERSION_JUMP) -> None:
        self.trust = trust
        self.engine = engine or default_engine()
        if threads < 1:
            raise ValueError(f"tree evaluation threads must be at least 1, got {threads}")
        self.threads = threads  # large batches split their rows over this many threads
        self.max_version_jump = max_version_jump
        if self.engine not in available_engines():
            raise ValueError(f"tree engine {self.engine!r} is unknown or unavailable here; "
                             f"available: {', '.join(available_engines())}")
        self._clock = clock
        self._pools: dict[str, PoolModels] = {}
        self._write = threading.Lock()
        self.rejected: Counter[str] = Counter()  # by reason
        self.applied = 0
        self.stale = 0

    # --- reading -------------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return bool(self._pools)

    def live(self) -> list[ServingModel]:
        return [model for pool in self._pools.values() for model in pool.models]

    def pool(self, pool_key: str) -> PoolModels | None:
        """The live models of ``pool_key``, if it has any."""
        return self._pools.get(pool_key)

    def version(self, pool_key: str, target: str, objective: str) -> int | None:
        pool = self._pools.get(pool_key)
        for model in pool.models if pool else ():
            if model.target == target and model.objective == objective:
                return model.version
        return None

    def predict(self, pool_key: str, features: np.ndarray) -> PoolPrediction:
        """Predict every live model of ``pool_key`` for the rows of ``features`` (n × len(FEATURE_NAMES))."""
        pools = self._pools
        pool = pools.get(pool_key)
        if pool is None:
            if not pools:
                raise NotReady("no model version has been applied yet")
            raise UnknownPool(f"no model for pool key {pool_key!r}; known pool keys: {sorted(pools)}")
        rows = check_batch(features)
        values = evaluate(pool.stack, rows, self.engine, self.threads)
        pool.to_milliseconds(values)
        return PoolPrediction(pool_key, pool.models, values)

    # --- writing -------------------------------------------------------------------------------------
    def apply(self, message: bytes) -> ApplyResult:
        """Verify a raw model-update message and swap it in; never raises for a bad message."""
        screened = self.screen(message)
        return screened if isinstance(screened, ApplyResult) else self.install(screened)

    def screen(self, message: bytes, staged: Mapping[str, int] | None = None) -> ModelUpdate | ApplyResult:
        """Decode ``message`` and judge its version against the live one (or a newer one ``staged`` for its key):
        the update, or the outcome of a message that goes no further (rejected, counted, or stale)."""
        try:
            update = decode_update(message, self.trust)
        except RejectedUpdate as err:
            return self._reject(err.reason, err.detail, None, None)
        except InvalidUpdate as err:
            reason = "checksum" if "checksum" in str(err) else "decode"
            return self._reject(reason, str(err), None, None)
        return self.judge(update, staged)

    def apply_update(self, update: ModelUpdate) -> ApplyResult:
        """Swap in an update already opened with :attr:`trust` (read by :mod:`headroom.model_topic`), after the
        same checks as :meth:`apply`'s."""
        judged = self.judge(update)
        return judged if isinstance(judged, ApplyResult) else self.install(judged)

    def judge(self, update: ModelUpdate, staged: Mapping[str, int] | None = None) -> ModelUpdate | ApplyResult:
        """``update`` if its version may follow the live one (or a newer one ``staged`` for its key, read before
        it), else the outcome: rejected as replayed (older than that) or too far ahead, or stale (the same)."""
        live_version = self.version(update.pool_key, update.target, update.objective)
        newest = max(live_version or 0, (staged or {}).get(update.key, 0)) or None
        refused = refusal(update, newest, self.max_version_jump)
        if refused is None:
            return update
        if refused.reason == STALE:
            self.stale += 1
            return ApplyResult(ApplyOutcome.STALE, update.key, update.version)
        return self._reject(refused.reason, refused.detail, update.key, update.version)

    def install(self, update: ModelUpdate) -> ApplyResult:
        """Verify a screened update's model and swap it in."""
        try:
            model = self._verify(update)
        except _Rejected as err:
            return self._reject(err.reason, err.detail, update.key, update.version)
        except Exception as err:  # a model XGBoost loads but this reader cannot lay out must not stop the tailer
            return self._reject("model", f"{type(err).__name__}: {err}", update.key, update.version)
        with self._write:
            pool = self._pools.get(model.pool_key)
            others = [m for m in pool.models if (m.target, m.objective) != (model.target, model.objective)] \
                if pool else []
            current = next((m for m in pool.models if m.key == model.key), None) if pool else None
            if current is not None and current.version >= model.version:  # lost a race to a newer one
                self.stale += 1
                return ApplyResult(ApplyOutcome.STALE, update.key, update.version)
            self._pools = {**self._pools, model.pool_key: PoolModels.of(model.pool_key, others + [model])}
            self.applied += 1
        log.info("model %s version %d is live (signed by %s)", model.key, model.version, model.signer or "nobody")
        return ApplyResult(ApplyOutcome.APPLIED, model.key, model.version)

    def _verify(self, update: ModelUpdate) -> ServingModel:
        try:
            check_schema(update)
            forest = forest_from_model(update.model, self.trust.bounds)
            check_transform(update, forest.attributes)
        except RejectedUpdate as err:
            raise _Rejected(err.reason, err.detail) from err
        except ModelOutOfBounds as err:
            raise _Rejected(err.reason, str(err)) from err
        except UnsupportedModel as err:
            raise _Rejected("model", str(err)) from err
        if forest.n_features != len(FEATURE_NAMES):
            raise _Rejected("schema", f"model has {forest.n_features} features, the schema has "
                                      f"{len(FEATURE_NAMES)}")
        _check_objective(update, forest)
        _check_range(update, forest)
        raw_probe = evaluate(ForestStack.of([forest]), PROBE_ROWS, self.engine)[0]
        probe = to_milliseconds(raw_probe.astype(np.float64), update.output_transform)
        if not np.isfinite(probe).all():
            raise _Rejected("probe", f"probe prediction is not finite ({int((~np.isfinite(probe)).sum())} of "
                                     f"{len(probe)} rows)")
        if (probe < 0).any():
            raise _Rejected("probe", f"probe prediction is negative (min {float(probe.min()):.6g})")
        reference = _xgboost_probe(update, forest)
        scale = np.maximum(np.abs(reference), 1.0)
        if (np.abs(raw_probe - reference) > PROBE_RTOL * scale).any():
            raise _Rejected("probe", "tree evaluation disagrees with XGBoost on the probe rows "
                                     f"(max difference {float(np.abs(raw_probe - reference).max()):.6g})")
        return ServingModel(pool_key=update.pool_key, target=update.target, objective=update.objective,
                         quantile=update.quantile, version=update.version, created_at=update.created_at,
                         applied_at=self._clock(), holdout_metrics=dict(update.holdout_metrics), forest=forest,
                         output_transform=update.output_transform, signer=update.signer)

    def _reject(self, reason: str, detail: str, key: str | None, version: int | None) -> ApplyResult:
        self.rejected[reason] += 1
        log.warning("rejected model update %s version %s (%s): %s", key or "?", version, reason, detail)
        return ApplyResult(ApplyOutcome.REJECTED, key, version, reason, detail)


class _Rejected(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _xgboost_probe(update: ModelUpdate, forest: Forest) -> np.ndarray:
    """XGBoost's raw outputs on the probe rows: those its trainer stored in the model, else computed here (a model
    from a trainer that stored none: importing XGBoost then takes seconds and a few tens of MiB, once)."""
    try:
        outputs = stamped(forest.attributes)
    except ValueError as err:
        raise _Rejected("probe", str(err)) from err
    if outputs is not None:
        return outputs
    try:
        return np.asarray(load_booster(update.model).inplace_predict(PROBE_ROWS))
    except RejectedUpdate as err:
        raise _Rejected(err.reason, err.detail) from err


def _check_objective(update: ModelUpdate, forest: Forest) -> None:
    is_quantile = forest.objective == "reg:quantileerror"
    if (update.objective == "quantile") != is_quantile:
        raise _Rejected("objective", f"message says objective {update.objective!r} but the model was trained "
                                     f"with {forest.objective!r}")
    if is_quantile and (update.quantile is None or abs(forest.quantiles[0] - update.quantile) > 1e-6):
        raise _Rejected("objective", f"message says quantile {update.quantile} but the model was trained for "
                                     f"{forest.quantiles[0]:.6g}")


def _check_range(update: ModelUpdate, forest: Forest) -> None:
    """Whatever rows it is given, the trees' sum stays a finite float32, and so does its value in milliseconds:
    bounded by the base score plus each tree's smallest (largest) leaf."""
    base = float(forest.base_score)
    low = base + float(forest.leaves.min(axis=1).astype(np.float64).sum())
    high = base + float(forest.leaves.max(axis=1).astype(np.float64).sum())
    top = float(np.finfo(np.float32).max)
    with np.errstate(over="ignore"):
        reach = to_milliseconds(np.array([low, high], dtype=np.float32), update.output_transform)
    if max(abs(low), abs(high)) >= top or not np.isfinite(reach).all():
        raise _Rejected("range", f"the trees add up to outputs from {low:.6g} to {high:.6g}, which after the "
                                 f"{update.output_transform!r} transform leave the finite milliseconds")


def check_batch(features: np.ndarray) -> np.ndarray:
    """The rows as a C-contiguous float32 matrix, or :class:`InvalidBatch` saying exactly what is wrong."""
    rows = np.asarray(features, dtype=np.float32)
    if rows.ndim != 2 or rows.shape[1] != len(FEATURE_NAMES):
        raise InvalidBatch(f"expected rows of {len(FEATURE_NAMES)} features ({', '.join(FEATURE_NAMES)}), "
                           f"got an array of shape {rows.shape}")
    if rows.shape[0] == 0:
        raise InvalidBatch("empty batch: at least one candidate row is needed")
    finite = np.isfinite(rows)
    if not finite.all():
        row, column = np.argwhere(~finite)[0]
        raise InvalidBatch(f"non-finite feature {FEATURE_NAMES[column]!r} = {rows[row, column]} in row {row} "
                           f"({int((~finite).sum())} non-finite values in total)")
    return np.ascontiguousarray(rows)
