"""llm-d's prediction server API, served from a predictor's :class:`~predictor.runtime.ModelRuntime`.

Routes (the reference's paths, fields and status codes):

- ``POST /predict/bulk/strict`` ``{"requests": [row, ...]}`` (1 to 10,000 rows) → ``{"predictions": [...],
  "total_requests", "successful_predictions", "failed_predictions", "processing_time_ms"}``, one prediction
  per row in row order; all or nothing: a body or row that fails validation → 422 with FastAPI's body, a row
  no live model can answer → 503.
- ``POST /predict/bulk`` — the same, but a row that cannot be predicted (invalid, or no model for its
  role) yields ``null`` in ``predictions`` and ``{"index", "error", "request"}`` in ``errors``; only a body
  that is not ``{"requests": [...]}`` with 1 to 10,000 items is a 422.
- ``POST /predict`` — one row, one prediction (422 / 503 as the strict bulk call).
- ``GET /healthz``, ``GET /readyz`` (200 once TTFT and TPOT models of the objective are live for the pool,
  503 before), ``GET /status``, ``POST /reload`` (looks at the model files now, when the server serves
  files, and answers the state), ``GET /``.

A prediction is ``{ttft_ms, tpot_ms, predicted_at, model_type, objective_type, quantile, last_model_load}``:
the models of the deployment's objective (``objective``: ``quantile``, the reference's default, or
``mean``; both are live, the gRPC API serves both), ``model_type`` ``xgboost``, ``quantile`` the quantile
models' quantile, ``last_model_load`` when the newest model used went live.

Rows carry raw values only; headroom computes the features (:func:`contract.llmd.raw_values`,
:func:`contract.features.feature_matrix`). A row's ``pod_type`` selects its role's pool key
(:func:`contract.llmd.pool_key_of`); each target is answered by the role's own model, else the pool's
monolithic one, else another role's (in disaggregated serving a request's TTFT is the prefill role's work
and its TPOT the decode role's).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
from aiohttp import web

from headroom.contract.features import feature_matrix
from headroom.contract.llmd import POD_TYPES, pool_key_of, raw_values
from headroom.contract.server_state import encoder_excess
from headroom.llmd.schema import (
    PREDICTION_FIELDS,
    PredictionRow,
    Unprocessable,
    bulk_items,
    check_row,
    decode_row,
    decode_rows,
    iso_time,
    json_response,
    row_dict,
)
from headroom.predictor.runtime import ModelRuntime

MODEL_TYPE = "xgboost"
DEFAULT_QUANTILE = 0.9  # reported by a mean deployment before any quantile model is live (the reference's alpha)
OBJECTIVES = ("quantile", "mean")
TARGETS = ("ttft", "tpot")
_NUMERIC = [name for name, field in PREDICTION_FIELDS.items() if field.kind != "pod_type"]


class Prediction(msgspec.Struct):
    ttft_ms: float
    tpot_ms: float
    predicted_at: str
    model_type: str
    objective_type: str
    quantile: float
    last_model_load: str | None


class RowError(msgspec.Struct):
    index: int
    error: str
    request: Any


class Outcome(msgspec.Struct):
    predictions: list[Prediction | None]
    errors: list[str | None]
    invalid: set[int]  # rows whose error is a validation error (the others: no model to answer them)


class PredictionApi:
    def __init__(self, runtime: ModelRuntime, *, pool_key: str = "default", objective: str = "quantile",
                 reload: Callable[[], bool] | None = None, clock: Callable[[], float] = time.time) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        self.runtime = runtime
        self.pool_key = pool_key
        self.objective = objective
        self._reload = reload  # looks at the model sources now; True when something changed
        self._clock = clock

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes([web.post("/predict/bulk/strict", self.bulk_strict), web.post("/predict/bulk", self.bulk),
                        web.post("/predict", self.single), web.get("/healthz", self.healthz),
                        web.get("/readyz", self.readyz), web.get("/status", self.status),
                        web.post("/reload", self.reload), web.get("/", self.root)])
        return app

    # --- predictions -----------------------------------------------------------------------------
    async def bulk_strict(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            rows = decode_rows(await request.read(), "requests", PredictionRow)
        except Unprocessable as err:
            return json_response(err.body, 422)
        outcome = self.predict(rows)
        invalid = [(i, e) for i, e in enumerate(outcome.errors) if e is not None and i in outcome.invalid]
        if invalid:
            detail = [_value_error(("body", "requests", i), e, rows[i]) for i, e in invalid]
            return json_response({"detail": detail}, 422)
        if any(e is not None for e in outcome.errors):
            return json_response({"detail": next(e for e in outcome.errors if e is not None)}, 503)
        n = len(rows)
        return json_response({"predictions": outcome.predictions, "total_requests": n, "successful_predictions": n,
                              "failed_predictions": 0, "processing_time_ms": (time.perf_counter() - started) * 1000})

    async def bulk(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        body = await request.read()
        try:
            rows = decode_rows(body, "requests", PredictionRow)
            items: list[Any] = [row_dict(row) for row in rows]
            checked: list[tuple[Any, list[Any]]] = [(row, []) for row in rows]
        except Unprocessable:  # some rows are invalid: each on its own
            try:
                items = bulk_items(body, "requests")
            except Unprocessable as err:
                return json_response(err.body, 422)
            checked = [check_row(item, PredictionRow, ("requests", i)) for i, item in enumerate(items)]
        valid = [i for i, (row, _) in enumerate(checked) if row is not None]
        errors = [RowError(i, _first_message(problems), items[i]) for i, (row, problems) in enumerate(checked)
                  if row is None]
        predictions: list[Prediction | None] = [None] * len(items)
        if valid:
            outcome = self.predict([checked[i][0] for i in valid])
            for position, i in enumerate(valid):
                predictions[i] = outcome.predictions[position]
                if outcome.errors[position] is not None:
                    errors.append(RowError(i, outcome.errors[position], items[i]))
            errors.sort(key=lambda e: e.index)
        failed = len(errors)
        return json_response({"predictions": predictions, "errors": errors, "total_requests": len(items),
                              "successful_predictions": len(items) - failed, "failed_predictions": failed,
                              "processing_time_ms": (time.perf_counter() - started) * 1000})

    async def single(self, request: web.Request) -> web.Response:
        try:
            row = decode_row(await request.read(), PredictionRow)
        except Unprocessable as err:
            return json_response(err.body, 422)
        outcome = self.predict([row])
        error = outcome.errors[0]
        if error is not None:
            return json_response({"detail": [_value_error(("body",), error, row)]}, 422) if outcome.invalid \
                else json_response({"detail": error}, 503)
        return json_response(outcome.predictions[0])

    def predict(self, rows: list[Any]) -> Outcome:
        """Predictions for decoded rows, in their order; a row that cannot be answered has None and its error."""
        n = len(rows)
        columns = {name: np.fromiter((getattr(r, name) for r in rows), dtype=np.float64, count=n)
                   for name in _NUMERIC}
        features = feature_matrix(raw_values(columns), n)  # a default is one number for every row
        errors: list[str | None] = [None] * n
        invalid = encoder_excess(columns["encoder_matched_size"], columns["encoder_input_size"])
        for i, error in invalid.items():
            errors[i] = error
        values = {target: np.full(n, np.nan) for target in TARGETS}
        loaded = 0.0
        for role, index in _by_role([r.pod_type or "" for r in rows], set(invalid)):
            sources = {target: self.source(role, target) for target in TARGETS}
            missing = [target for target, pool in sources.items() if pool is None]
            for i in index.tolist() if missing else ():
                errors[i] = (f"no live {self.objective} {missing[0].upper()} model for pool key "
                             f"{pool_key_of(self.pool_key, role)!r} (pod_type {role!r}) yet")
            for pool in () if missing else dict.fromkeys(sources.values()):
                prediction = self.runtime.predict(pool, features[index])  # type: ignore[arg-type]
                for target in TARGETS:
                    if sources[target] == pool:
                        values[target][index] = prediction.get(target, self.objective)
                loaded = max([loaded, *(m.applied_at for m in prediction.models
                                        if m.objective == self.objective and sources.get(m.target) == pool)])
        meta = (iso_time(self._clock()), MODEL_TYPE, self.objective, self.quantile(),
                iso_time(loaded) if loaded else None)
        ttft, tpot = (np.maximum(values[target], 0.0).tolist() for target in TARGETS)
        predictions = [None if error is not None else Prediction(t, p, *meta)
                       for t, p, error in zip(ttft, tpot, errors)]
        return Outcome(predictions, errors, set(invalid))

    def source(self, role: str, target: str, objective: str | None = None) -> str | None:
        """The pool key whose model answers ``target`` for rows of ``role`` (see the module docstring)."""
        objective = objective or self.objective
        order = [pool_key_of(self.pool_key, role), self.pool_key] + [pool_key_of(self.pool_key, r) for r in POD_TYPES]
        return next((pool for pool in order if self.runtime.version(pool, target, objective) is not None), None)

    # --- state -------------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """TTFT and TPOT models of the objective are live for the pool (or its roles)."""
        return all(self.source("", target) is not None for target in TARGETS)

    def quantile(self) -> float:
        """The quantile of the pool's quantile TTFT model (:data:`DEFAULT_QUANTILE` before there is one)."""
        pool = self.source("", "ttft", "quantile")
        model = next((m for m in self.runtime.live() if (m.pool_key, m.target, m.objective) ==
                      (pool, "ttft", "quantile")), None)
        return model.quantile if model is not None and model.quantile is not None else DEFAULT_QUANTILE

    def last_model_load(self) -> str | None:
        loads = [m.applied_at for m in self.runtime.live() if m.objective == self.objective]
        return iso_time(max(loads)) if loads else None

    def state(self) -> dict[str, Any]:
        return {"is_ready": self.ready, "model_type": MODEL_TYPE, "objective_type": self.objective,
                "quantile": self.quantile(), "last_model_load": self.last_model_load()}

    async def healthz(self, _request: web.Request) -> web.Response:
        return json_response({"status": "ok", "service": "headroom-latency-predictor"})

    async def readyz(self, _request: web.Request) -> web.Response:
        if not self.ready:
            return json_response({"detail": "Models are not ready"}, 503)
        return json_response({"status": "ready", "model_type": MODEL_TYPE, "objective_type": self.objective,
                              "quantile": self.quantile()})

    async def status(self, _request: web.Request) -> web.Response:
        live = {(m.pool_key, m.target, m.objective): m for m in self.runtime.live()}
        models = [{"pool_key": m.pool_key, "target": m.target, "objective": m.objective, "version": m.version,
                   "quantile": m.quantile, "created_at": iso_time(m.created_at), "applied_at": iso_time(m.applied_at)}
                  for m in live.values()]
        return json_response({**self.state(), "pool_key": self.pool_key,
                              "models_exist": {f"{t}_model": self.source("", t) is not None for t in TARGETS},
                              "models": models})

    async def reload(self, _request: web.Request) -> web.Response:
        synced = self._reload() if self._reload is not None else False
        state = self.state()
        return json_response({"synced": synced, "loaded": state["is_ready"], **state,
                              "last_load_time": state["last_model_load"]})

    async def root(self, _request: web.Request) -> web.Response:
        return json_response({"message": "headroom latency predictor (llm-d prediction API) is running",
                              "pool_key": self.pool_key, **self.state()})


def _by_role(roles: list[str], skipped: set[int]) -> list[tuple[str, np.ndarray]]:
    """The rows of each role (pod type), in row order, without the ``skipped`` ones."""
    if not skipped and roles.count(roles[0]) == len(roles):
        return [(roles[0], np.arange(len(roles)))]
    groups: dict[str, list[int]] = {}
    for i, role in enumerate(roles):
        if i not in skipped:
            groups.setdefault(role, []).append(i)
    return [(role, np.array(index, dtype=np.intp)) for role, index in groups.items()]



def _first_message(problems: list[dict[str, Any]]) -> str:
    return "; ".join(f"{'.'.join(map(str, p['loc'][2:])) or 'row'}: {p['msg']}" for p in problems)


def _value_error(loc: tuple[Any, ...], message: str, row: Any) -> dict[str, Any]:
    return {"type": "value_error", "loc": list(loc), "msg": f"Value error, {message}", "input": row_dict(row)}
