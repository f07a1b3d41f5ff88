"""llm-d's prediction server API, served from a predictor's :class:`~predictor.runtime.ModelRuntime`.

Routes (the reference's paths, fields and status codes):

- ``POST /predict/bulk/strict`` ``{"requests": [row, ...]}`` (1 to 10,000 rows) → ``{"predictions": [...],
  "total_requests", "successful_predictions", "failed_predictions", "processing_time_ms"}``, one prediction
  per row in row order; all or nothing: a body or row that fails validation → 422 with FastAPI's body, a row
  that cannot be answered (no model and no prior, below) → 503.
- ``POST /predict/bulk`` — the same body checked the same way (any invalid row: 422, as the reference's
  schema does), but a row that cannot be answered yields ``null`` in ``predictions`` and ``{"index",
  "error", "request"}`` in ``errors``.
- ``POST /predict`` — one row, one prediction (422 / 503 as the strict bulk call).
- ``GET /healthz``; ``GET /readyz`` (200 once the model sources have been read — the topic to its end, the
  files once — 503 before); ``GET /status``, ``POST /reload`` (looks at the model files now, when the server
  serves files, and answers the state), ``GET /``; ``GET /metrics`` (the predictor's Prometheus metrics, for
  sidecars that serve no metrics port of their own).

A prediction is ``{ttft_ms, tpot_ms, predicted_at, model_type, objective_type, quantile, last_model_load,
ttft_source, tpot_source}``: the models of the deployment's objective (``objective``: ``quantile``, the
reference's default, or ``mean``; both are live, the gRPC API serves both), ``model_type`` ``xgboost``,
``quantile`` the quantile models' quantile, ``last_model_load`` when the newest model used went live.

**The prior.** A target no model has been trained for yet (a fresh install; TPOT for ever when the endpoint
picker runs with ``streamingMode: false`` and sends TTFT samples only) is answered with ``prior_ms``, the
same for every row, and labelled: ``<target>_source`` is ``"prior"`` (``"model"`` otherwise), ``/status``
lists the targets answered with it, and the predictor counts them
(``headroom_predictor_http_prior_predictions_total{target}``). One value for every candidate ranks none
above another, and a small one meets every SLO, so during warm-up the picker neither sheds nor splits tiers
on a number nobody measured. ``prior_ms`` < 0 turns it off: such rows are refused (503) until a model is
live, and readiness waits for both models.

Rows carry raw values only; headroom computes the features (:func:`headroom.llmd_terms.raw_values`,
:func:`contract.features.feature_matrix`). A row's ``pod_type`` selects its role's pool key
(:func:`headroom.llmd_terms.role_of`, :func:`headroom.llmd_terms.pool_key_of`); each target is answered by the role's
own model, else the pool's monolithic one, else another role's (in disaggregated serving a request's TTFT
is the prefill role's work and its TPOT the decode role's).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import numpy as np
from aiohttp import web
from prometheus_client import generate_latest

from headroom.contract.features import feature_matrix
from headroom.contract.server_state import encoder_excess
from headroom.llmd_terms import ROLES, pool_key_of, raw_values, role_of
from headroom.predictor.llmd_schema import (
    PREDICTION_FIELDS,
    PredictionRow,
    Unprocessable,
    decode_row,
    decode_rows,
    iso_time,
    json_response,
    row_dict,
)
from headroom.predictor.metrics import PredictorMetrics
from headroom.predictor.runtime import ModelRuntime
from headroom.predictor.settings import PredictorSettings

MODEL_TYPE = "xgboost"
DEFAULT_QUANTILE = 0.9  # reported by a mean deployment before any quantile model is live (the reference's alpha)
OBJECTIVES = ("quantile", "mean")
TARGETS = ("ttft", "tpot")
_NUMERIC = [name for name, field in PREDICTION_FIELDS.items() if field.kind != "pod_type"]
Handler = Callable[[web.Request], Awaitable[web.Response]]


class Prediction(msgspec.Struct):
    ttft_ms: float
    tpot_ms: float
    predicted_at: str
    model_type: str
    objective_type: str
    quantile: float
    last_model_load: str | None
    ttft_source: str  # "model" or "prior"
    tpot_source: str


class RowError(msgspec.Struct):
    index: int
    error: str
    request: Any


class Outcome(msgspec.Struct):
    predictions: list[Prediction | None]
    errors: list[str | None]
    invalid: set[int]  # rows whose error is a validation error (the others: nothing to answer them with)
    models: int  # targets answered by a model, per row


class PredictionApi:
    def __init__(self, runtime: ModelRuntime, *, pool_key: str = "default", objective: str = "quantile",
                 prior_ms: float = PredictorSettings.http_prior_ms, caught_up: Callable[[], bool] = lambda: True,
                 reload: Callable[[], bool] | None = None, metrics: PredictorMetrics | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
        self.runtime = runtime
        self.pool_key = pool_key
        self.objective = objective
        self.prior_ms = prior_ms
        self.metrics = metrics or PredictorMetrics(runtime)
        self._caught_up = caught_up  # the model sources have been read once (topic to its end, files)
        self._reload = reload  # looks at the model sources now; True when something changed
        self._clock = clock

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        routes = {"/predict/bulk/strict": self.bulk_strict, "/predict/bulk": self.bulk, "/predict": self.single,
                  "/reload": self.reload}
        pages = {"/healthz": self.healthz, "/readyz": self.readyz, "/status": self.status, "/metrics": self.scrape,
                 "/": self.root}
        app.add_routes([web.post(path, self._counted(path, handler)) for path, handler in routes.items()] +
                       [web.get(path, handler) for path, handler in pages.items()])
        return app

    def _counted(self, route: str, handler: Handler) -> Handler:
        """``handler``, its calls counted by route and status (``headroom_predictor_http_requests_total``)."""
        async def counted(request: web.Request) -> web.Response:
            response = await handler(request)
            self.metrics.http_call(route, response.status)
            return response
        return counted

    # --- predictions -----------------------------------------------------------------------------
    async def bulk_strict(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            rows = decode_rows(await request.read(), "requests", PredictionRow)
        except Unprocessable as err:
            return json_response(err.body, 422)
        outcome = self.predict(rows)
        if outcome.invalid:
            return self._invalid(outcome, rows, ("body", "requests"))
        if any(e is not None for e in outcome.errors):
            return json_response({"detail": next(e for e in outcome.errors if e is not None)}, 503)
        n = len(rows)
        self._served(n, outcome.models, started)
        return json_response({"predictions": outcome.predictions, "total_requests": n, "successful_predictions": n,
                              "failed_predictions": 0, "processing_time_ms": (time.perf_counter() - started) * 1000})

    async def bulk(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            rows = decode_rows(await request.read(), "requests", PredictionRow)
        except Unprocessable as err:
            return json_response(err.body, 422)
        outcome = self.predict(rows)
        if outcome.invalid:
            return self._invalid(outcome, rows, ("body", "requests"))
        errors = [RowError(i, error, row_dict(rows[i])) for i, error in enumerate(outcome.errors) if error is not None]
        answered = len(rows) - len(errors)
        self._served(answered, outcome.models, started)
        return json_response({"predictions": outcome.predictions, "errors": errors, "total_requests": len(rows),
                              "successful_predictions": answered, "failed_predictions": len(errors),
                              "processing_time_ms": (time.perf_counter() - started) * 1000})

    async def single(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            row = decode_row(await request.read(), PredictionRow)
        except Unprocessable as err:
            return json_response(err.body, 422)
        outcome = self.predict([row])
        if outcome.invalid:
            return self._invalid(outcome, [row], ("body",))
        if outcome.errors[0] is not None:
            return json_response({"detail": outcome.errors[0]}, 503)
        self._served(1, outcome.models, started)
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
        unmodelled = [target for target in TARGETS if self.source("", target) is None]
        values = {target: np.full(n, self.prior_ms if target in unmodelled else np.nan) for target in TARGETS}
        loaded = 0.0
        for role, index in _by_role([role_of(r.pod_type) for r in rows], set(invalid)):
            if unmodelled and self.prior_ms < 0:
                for i in index.tolist():
                    errors[i] = (f"no live {self.objective} {unmodelled[0].upper()} model for pool key "
                                 f"{pool_key_of(self.pool_key, role)!r} (pod_type {role!r}) yet")
                continue
            sources = {target: self.source(role, target) for target in TARGETS if target not in unmodelled}
            for pool in dict.fromkeys(sources.values()):
                prediction = self.runtime.predict(pool, features[index])  # type: ignore[arg-type]
                for target, source in sources.items():
                    if source == pool:
                        values[target][index] = prediction.get(target, self.objective)
                loaded = max([loaded, *(m.applied_at for m in prediction.models
                                        if m.objective == self.objective and sources.get(m.target) == pool)])
        answered = n - sum(error is not None for error in errors)
        for target in unmodelled if self.prior_ms >= 0 else ():
            self.metrics.prior(target, answered)
        ttft_source, tpot_source = ("prior" if target in unmodelled else "model" for target in TARGETS)
        meta = (iso_time(self._clock()), MODEL_TYPE, self.objective, self.quantile(),
                iso_time(loaded) if loaded else None, ttft_source, tpot_source)
        ttft, tpot = (np.maximum(values[target], 0.0).tolist() for target in TARGETS)
        predictions = [None if error is not None else Prediction(t, p, *meta)
                       for t, p, error in zip(ttft, tpot, errors)]
        return Outcome(predictions, errors, set(invalid), len(TARGETS) - len(unmodelled))

    def source(self, role: str, target: str, objective: str | None = None) -> str | None:
        """The pool key whose model answers ``target`` for rows of ``role`` (see the module docstring)."""
        objective = objective or self.objective
        order = [pool_key_of(self.pool_key, role), self.pool_key] + [pool_key_of(self.pool_key, r) for r in ROLES]
        return next((pool for pool in order if self.runtime.version(pool, target, objective) is not None), None)

    def _served(self, rows: int, models: int, started: float) -> None:
        self.metrics.answered(rows, models, time.perf_counter() - started)

    @staticmethod
    def _invalid(outcome: Outcome, rows: list[Any], loc: tuple[Any, ...]) -> web.Response:
        """The 422 of rows that failed a check of their own (``loc`` of the body's list, or of a lone row)."""
        detail = [_value_error((*loc, i) if loc[1:] else loc, outcome.errors[i] or "", rows[i])
                  for i in sorted(outcome.invalid)]
        return json_response({"detail": detail}, 422)

    # --- state -------------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """The model sources have been read, and every target can be answered (by a model or the prior)."""
        return self._caught_up() and (self.prior_ms >= 0 or not self.unmodelled())

    def unmodelled(self) -> list[str]:
        """The targets no live model of the objective answers yet."""
        return [target for target in TARGETS if self.source("", target) is None]

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
        if not self._caught_up():
            return json_response({"detail": "Models are not ready: the model sources have not been read yet"}, 503)
        if not self.ready:
            return json_response({"detail": f"Models are not ready: no live {self.objective} "
                                            f"{' or '.join(t.upper() for t in self.unmodelled())} model yet, and "
                                            f"no prior (HEADROOM_PREDICTOR_HTTP_PRIOR_MS < 0)"}, 503)
        return json_response({"status": "ready", "model_type": MODEL_TYPE, "objective_type": self.objective,
                              "quantile": self.quantile(), "answered_with_prior": self._with_prior()})

    async def status(self, _request: web.Request) -> web.Response:
        models = [{"pool_key": m.pool_key, "target": m.target, "objective": m.objective, "version": m.version,
                   "quantile": m.quantile, "created_at": iso_time(m.created_at), "applied_at": iso_time(m.applied_at)}
                  for m in self.runtime.live()]
        return json_response({**self.state(), "training_server_url": None,  # models come from model-updates
                              "models_exist": {f"{t}_model": self.source("", t) is not None for t in TARGETS},
                              "ensemble_active": False, "pool_key": self.pool_key,
                              "prior_ms": self.prior_ms if self.prior_ms >= 0 else None,
                              "answered_with_prior": self._with_prior(), "models": models})

    async def reload(self, _request: web.Request) -> web.Response:
        synced = self._reload() if self._reload is not None else False
        state = self.state()
        return json_response({"synced": synced, "loaded": state["is_ready"], **state,
                              "last_load_time": state["last_model_load"]})

    async def scrape(self, _request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry), content_type="text/plain", charset="utf-8")

    async def root(self, _request: web.Request) -> web.Response:
        return json_response({"message": "headroom latency predictor (llm-d prediction API) is running",
                              "pool_key": self.pool_key, **self.state()})

    def _with_prior(self) -> list[str]:
        return self.unmodelled() if self.prior_ms >= 0 else []


def _by_role(roles: list[str], skipped: set[int]) -> list[tuple[str, np.ndarray]]:
    """The rows of each role, in row order, without the ``skipped`` ones."""
    if not skipped and roles.count(roles[0]) == len(roles):
        return [(roles[0], np.arange(len(roles)))]
    groups: dict[str, list[int]] = {}
    for i, role in enumerate(roles):
        if i not in skipped:
            groups.setdefault(role, []).append(i)
    return [(role, np.array(index, dtype=np.intp)) for role, index in groups.items()]


def _value_error(loc: tuple[Any, ...], message: str, row: Any) -> dict[str, Any]:
    return {"type": "value_error", "loc": list(loc), "msg": f"Value error, {message}", "input": row_dict(row)}
