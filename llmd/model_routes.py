"""The model routes of llm-d's training API, answered from the versions on ``model-updates`` (:mod:`llmd.model_shelf`).

headroom's training server trains nothing (the worker does), and its models are XGBoost models shipped as
signed model-update messages, never pickles. What the reference's clients read of them:

- ``GET /model/download/info`` (the endpoint picker, at start and every minute) → ``model_type`` ``xgboost``,
  ``objective_type``, ``quantile``, ``available_endpoints`` (the trees), ``model_status``
  (``ttft_model_ready``, ``tpot_model_ready``: a trained model is listed) and ``evaluation_info``.
- ``GET /model/ttft/xgb/json``, ``/model/tpot/xgb/json`` → the trees as XGBoost dumps them; before a model of
  the target is trained, ``[]`` with ``X-Headroom-Model: prior``: the prior the prediction servers answer
  with (:mod:`predictor.llmd_api`) is a constant, a model without trees.
- ``GET /models/list`` → ``ttft``, ``tpot`` (the newest versions: size, time, version) and the reference's
  ``ttft_gated``, ``tpot_gated``, which never exist here (no queue-gated ensemble); ``GET /model/{name}/info``.
- ``GET /model/export`` → a ``tar.gz`` of the newest version of every model of the pool and its roles, each
  the message as published (``<key>.hrmu``, as ``headroom models export`` writes it, which
  ``HEADROOM_PREDICTOR_MODELS`` serves once extracted), and ``metadata.json``; 503 before any is listed.
- ``GET /model/{name}/download`` → 404: the reference's predictors load pickles.

``ttft`` and ``tpot`` name the models of the pool key for the configured objective.
"""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Callable
from typing import Any

import msgspec
from aiohttp import web

from headroom.llmd.model_shelf import ModelShelf, ShelvedModel
from headroom.model_files import file_name
from headroom.predictor.llmd_schema import iso_time, json_response

MODEL_TYPE = "xgboost"
MODEL_NAMES = ("ttft", "tpot")
ENSEMBLE_NAMES = ("ttft_gated", "tpot_gated")  # the reference's queue-gated ensembles: headroom has none
DEFAULT_QUANTILE = 0.9  # the reference's alpha, reported before a quantile model is listed


class ModelRoutes:
    def __init__(self, shelf: ModelShelf, *, pool_key: str, objective: str,
                 clock: Callable[[], float] = time.time) -> None:
        self.shelf, self.pool_key, self.objective = shelf, pool_key, objective
        self._clock = clock

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/model/download/info", self.download_info), web.get("/models/list", self.models_list),
                web.get("/model/export", self.export), web.get("/model/{name}/xgb/json", self.xgb_json),
                web.get("/model/{name}/info", self.model_info), web.get("/model/{name}/download", self.download)]

    # --- what the models are -------------------------------------------------------------------
    def model(self, name: str) -> ShelvedModel | None:
        return self.shelf.get(self.pool_key, name, self.objective)

    def ours(self, key: str) -> bool:
        """Whether a model key is of this pool or one of its roles."""
        pool = key.rsplit("/", 2)[0]
        return pool == self.pool_key or pool.startswith(f"{self.pool_key}-")

    def quantile(self) -> float:
        shelved = self.shelf.get(self.pool_key, "ttft", "quantile")
        return shelved.update.quantile if shelved and shelved.update.quantile else DEFAULT_QUANTILE

    def ready(self) -> bool:
        return all(self.model(name) is not None for name in MODEL_NAMES)

    # --- routes --------------------------------------------------------------------------------
    async def download_info(self, _request: web.Request) -> web.Response:
        q = self.quantile()
        return json_response({
            "model_type": MODEL_TYPE, "objective_type": self.objective, "quantile": q,
            "available_endpoints": {"trees": {f"{name}_trees": f"/model/{name}/xgb/json" for name in MODEL_NAMES},
                                    "export": "/model/export"},
            "model_status": {f"{name}_model_ready": self.model(name) is not None for name in MODEL_NAMES},
            "evaluation_info": {
                "quantile_loss": "Pinball loss on each version's holdout rows (holdout_metrics.pinball)",
                "coverage_percent": f"Share of holdout actuals at or below the predicted {q:.0%} quantile "
                                    f"(target: {q * 100:.1f}%)",
                "violation_rate_percent": f"Share above it (target: {(1 - q) * 100:.1f}%)"},
            "models_from": "model-updates"})

    async def models_list(self, _request: web.Request) -> web.Response:
        models = {name: self._listing(self.model(name)) for name in MODEL_NAMES}
        models.update({name: self._listing(None) for name in ENSEMBLE_NAMES})
        q = self.quantile()
        return json_response({"models": models, "model_type": MODEL_TYPE, "objective_type": self.objective,
                              "quantile": q, "server_time": iso_time(self._clock()),
                              "evaluation_metrics": {"quantile_loss": "Lower is better",
                                                     "coverage_percent": f"Target: {q * 100:.1f}%",
                                                     "violation_rate_percent": f"Target: {(1 - q) * 100:.1f}%"},
                              "pool_keys": sorted({m.update.pool_key for m in self.shelf.models.values()})})

    async def model_info(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        shelved, error = self._named(name)
        if shelved is None:
            return error
        update = shelved.update
        return json_response({"model_name": name, "path": update.key, "size_bytes": len(update.model),
                              "last_modified": iso_time(update.created_at), "exists": True, "model_type": MODEL_TYPE,
                              "quantile": update.quantile, "version": update.version, "objective": update.objective,
                              "holdout_metrics": update.holdout_metrics, "window_stats": update.window_stats})

    async def xgb_json(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in MODEL_NAMES:
            return json_response({"detail": f"Unknown model: {name}"}, 404)
        shelved = self.model(name)
        if shelved is None:
            return web.Response(body=b"[]", content_type="application/json", headers={"X-Headroom-Model": "prior"})
        trees = shelved.booster.get_dump(dump_format="json")
        return web.Response(body=b"[" + ",".join(trees).encode() + b"]", content_type="application/json",
                            headers={"X-Headroom-Model": f"{shelved.update.key} v{shelved.update.version}"})

    async def export(self, _request: web.Request) -> web.Response:
        shelved = [m for key, m in sorted(self.shelf.models.items()) if self.ours(key)]
        if not shelved:
            return json_response({"detail": "Models are not ready: no model of pool key "
                                            f"{self.pool_key!r} has been published yet"}, 503)
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w:gz") as tar:
            for model in shelved:
                _add(tar, file_name(model.update.key), model.message)
            _add(tar, "metadata.json", msgspec.json.format(msgspec.json.encode({
                "model_type": MODEL_TYPE, "objective_type": self.objective, "quantile_alpha": self.quantile(),
                "exported_at": iso_time(self._clock()), "pool_key": self.pool_key,
                "models": [{"key": m.update.key, "version": m.update.version, "file": file_name(m.update.key),
                            "created_at": iso_time(m.update.created_at), "window_stats": m.update.window_stats}
                           for m in shelved]})))
        return web.Response(body=archive.getvalue(), content_type="application/gzip",
                            headers={"Content-Disposition": "attachment; filename=seed-model.tar.gz"})

    async def download(self, request: web.Request) -> web.Response:
        return json_response({"detail": f"model downloads are pickles, which headroom never writes, serves or loads; "
                                        f"prediction servers read model-updates or model files (GET /model/export, "
                                        f"headroom models export), and /model/{request.match_info['name']}/xgb/json "
                                        f"dumps the trees"}, 404)

    def _named(self, name: str) -> tuple[Any, web.Response]:
        if name not in MODEL_NAMES + ENSEMBLE_NAMES:
            return None, json_response({"detail": f"Unknown model: {name}"}, 404)
        shelved = self.model(name) if name in MODEL_NAMES else None
        return shelved, json_response({"detail": f"Model {name} not found"}, 404)

    @staticmethod
    def _listing(shelved: ShelvedModel | None) -> dict[str, Any]:
        return {"exists": shelved is not None, "size_bytes": len(shelved.update.model) if shelved else 0,
                "last_modified": iso_time(shelved.update.created_at) if shelved else None,
                "version": shelved.update.version if shelved else None}


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), int(time.time())
    tar.addfile(info, io.BytesIO(data))
