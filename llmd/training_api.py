"""llm-d's training server API: its samples become telemetry; its model listings come from ``model-updates``.

Routes (the reference's paths, fields and status codes):

- ``POST /add_training_data_bulk`` ``{"entries": [entry, ...]}`` → 202 ``{"message": "Accepted N training
  samples.", "telemetry": k, "dead_lettered": m}``. The body is checked as the reference checks it (any
  invalid entry → 422 with FastAPI's body, nothing sent); each entry then becomes one telemetry record
  (:func:`contract.llmd.sample_record`) sent to the ``telemetry`` topic, where the worker's windows, drift
  detectors, promotion gate and model updates take it like any other. An entry the telemetry contract
  refuses goes to the dead-letter topic with its reason (headers :data:`~contract.topics.REASON_HEADER`,
  :data:`~contract.topics.SOURCE_HEADER`); nothing is dropped unaccounted.
- ``GET /healthz``; ``GET /readyz`` (200 once the broker has answered: the models on ``model-updates``
  have been read, 503 before); ``GET /metrics`` (Prometheus); ``GET /data/status`` (samples received, per
  target and per bucket of the reference's 5 × 20 × 4 strata, telemetry sent, dead letters, models
  trained); ``GET /models/list``; ``GET /model/{name}/info`` (``ttft``, ``tpot``); ``GET
  /model/ttft/xgb/json`` and ``/model/tpot/xgb/json`` (the trees, as XGBoost dumps them); ``GET /``.
- ``GET /model/{name}/download`` → 404: the reference's predictors load pickles, and headroom never
  writes, serves or loads one; headroom's prediction servers read ``model-updates`` or model files.

``ttft`` and ``tpot`` name the models of the pool key for the configured objective.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

import msgspec
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from headroom.contract.llmd import sample_record
from headroom.contract.strata import kv_bucket, prefix_bucket, queue_bucket
from headroom.contract.telemetry import InvalidRecord, TelemetryRecord
from headroom.llmd.model_shelf import ModelShelf
from headroom.llmd.schema import (
    TrainingRow,
    Unprocessable,
    decode_rows,
    iso_time,
    json_response,
    row_dict,
    timestamp_of,
)

MODEL_TYPE = "xgboost"
MODEL_NAMES = ("ttft", "tpot")


class TelemetrySink(Protocol):
    def send(self, record: TelemetryRecord) -> None: ...


class DeadLetterSink(Protocol):
    def send(self, key: bytes, value: bytes, reason: str, source: str) -> None: ...


class TrainingApi:
    def __init__(self, telemetry: TelemetrySink, dead_letters: DeadLetterSink, shelf: ModelShelf, *,
                 pool_key: str = "default", objective: str = "quantile", clock: Callable[[], float] = time.time,
                 deliveries: Callable[[], dict[str, int]] | None = None) -> None:
        self.telemetry, self.dead_letters, self.shelf = telemetry, dead_letters, shelf
        self.deliveries = deliveries or dict  # what became of the records sent: delivered, failed, dropped
        self.pool_key, self.objective = pool_key, objective
        self._clock = clock
        self.received: Counter[str] = Counter()  # samples by what they observed: "ttft", "tpot"
        self.outcomes: Counter[str] = Counter()  # samples by where they went: "telemetry", "dead_letter"
        self.buckets: Counter[tuple[str, int, int, int]] = Counter()  # (model, queue, cache, prefix bucket)
        self.rejected_bodies = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes([
            web.post("/add_training_data_bulk", self.add_bulk), web.get("/healthz", self.healthz),
            web.get("/readyz", self.readyz), web.get("/metrics", self.metrics),
            web.get("/data/status", self.data_status),
            web.get("/models/list", self.models_list), web.get("/model/{name}/xgb/json", self.xgb_json),
            web.get("/model/{name}/info", self.model_info), web.get("/model/{name}/download", self.download),
            web.get("/", self.root)])
        return app

    # --- samples -----------------------------------------------------------------------------------
    async def add_bulk(self, request: web.Request) -> web.Response:
        try:
            rows = decode_rows(await request.read(), "entries", TrainingRow)
        except Unprocessable as err:
            self.rejected_bodies += 1
            return json_response(err.body, 422)
        sent, dead = self.ingest(rows)
        return json_response({"message": f"Accepted {len(rows)} training samples.", "telemetry": sent,
                              "dead_lettered": dead}, 202)

    def ingest(self, rows: list[Any]) -> tuple[int, int]:
        """Send each row as a telemetry record, or as a dead letter with its reason; ``(sent, dead)``."""
        call, now = uuid.uuid4().hex[:16], self._clock()
        sent = 0
        for index, row in enumerate(rows):
            sample = row_dict(row)
            request_id = f"llm-d-{call}-{index}"
            try:
                record = sample_record(sample, pool_key=self.pool_key, request_id=request_id, received_at=now,
                                       timestamp=timestamp_of(row.timestamp))
            except InvalidRecord as err:
                self.dead_letters.send(self.pool_key.encode(), msgspec.json.encode(sample), err.reason,
                                       f"llm-d/add_training_data_bulk/{request_id}")
                self.outcomes["dead_letter"] += 1
                continue
            self.telemetry.send(record)
            self.outcomes["telemetry"] += 1
            sent += 1
            strata = (queue_bucket(record.num_waiting), kv_bucket(record.kv_cache_usage),
                      prefix_bucket(record.prefix_match))
            for target, observed in (("ttft", record.ttft_ms), ("tpot", record.tpot_ms)):
                if observed is not None:
                    self.received[target] += 1
                    self.buckets[(target, *strata)] += 1
        return sent, len(rows) - sent

    # --- status ------------------------------------------------------------------------------------
    async def healthz(self, _request: web.Request) -> web.Response:
        return json_response({"status": "ok"})

    async def readyz(self, _request: web.Request) -> web.Response:
        if not self.shelf.caught_up.is_set():
            return json_response({"detail": "the broker has not answered yet"}, 503)
        return json_response({"status": "ready"})

    async def data_status(self, _request: web.Request) -> web.Response:
        ttft, tpot = self.received["ttft"], self.received["tpot"]
        distribution = {f"queue_{q}_cache_{c}_prefix_{p}": n for (model, q, c, p), n in sorted(self.buckets.items())
                        if model == "ttft"}
        trained = {key: count for key, count in sorted(self.shelf.published.items()) if self._ours(key)}
        return json_response({
            "training_data": {"ttft_samples": ttft, "tpot_samples": tpot, "total_samples": ttft + tpot},
            "telemetry": {"records_sent": self.outcomes["telemetry"], "dead_lettered": self.outcomes["dead_letter"],
                          "bodies_rejected": self.rejected_bodies, **self.deliveries()},
            "bucket_distribution": distribution,
            "models_trained": {"versions": sum(trained.values()), "by_model": trained,
                               "rejected": dict(sorted(self.shelf.rejected.items()))},
            "model_ready": all(self._model(name) is not None for name in MODEL_NAMES),
            "last_retrain": self._last_retrain()})

    async def models_list(self, _request: web.Request) -> web.Response:
        models = {}
        for name in MODEL_NAMES:
            shelved = self._model(name)
            models[name] = {"exists": shelved is not None, "size_bytes": len(shelved.update.model) if shelved else 0,
                            "last_modified": iso_time(shelved.update.created_at) if shelved else None,
                            "version": shelved.update.version if shelved else None}
        return json_response({"models": models, "model_type": MODEL_TYPE, "objective_type": self.objective,
                              "quantile": self._quantile(), "server_time": iso_time(self._clock()),
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
        shelved, error = self._named(request.match_info["name"])
        if shelved is None:
            return error
        trees = shelved.booster.get_dump(dump_format="json")
        return web.Response(body=b"[" + ",".join(trees).encode() + b"]", content_type="application/json")

    async def download(self, request: web.Request) -> web.Response:
        return json_response({"detail": f"model downloads are pickles, which headroom never writes, serves or loads; "
                                f"prediction servers read model-updates or model files (headroom models export), "
                                f"and /model/{request.match_info['name']}/xgb/json dumps the trees"}, 404)

    async def metrics(self, _request: web.Request) -> web.Response:
        registry = CollectorRegistry()
        registry.register(_Collector(self))
        return web.Response(body=generate_latest(registry), content_type="text/plain",
                            headers={"X-Content-Type-Options": "nosniff"}, charset="utf-8")

    async def root(self, _request: web.Request) -> web.Response:
        return json_response({"message": "headroom latency predictor (llm-d training API) is running",
                              "model_type": MODEL_TYPE, "objective_type": self.objective, "quantile": self._quantile(),
                              "pool_key": self.pool_key})

    # --- models ------------------------------------------------------------------------------------
    def _model(self, name: str) -> Any:
        return self.shelf.get(self.pool_key, name, self.objective)

    def _named(self, name: str) -> tuple[Any, web.Response]:
        if name not in MODEL_NAMES:
            return None, json_response({"detail": f"Unknown model: {name}"}, 404)
        shelved = self._model(name)
        return shelved, json_response({"detail": f"Model {name} not found"}, 404)

    def _ours(self, key: str) -> bool:
        pool = key.rsplit("/", 2)[0]
        return pool == self.pool_key or pool.startswith(f"{self.pool_key}-")

    def _quantile(self) -> float:
        shelved = self.shelf.get(self.pool_key, "ttft", "quantile")
        return shelved.update.quantile if shelved and shelved.update.quantile else 0.9

    def _last_retrain(self) -> str | None:
        times = [m.update.created_at for key, m in self.shelf.models.items() if self._ours(key)]
        return iso_time(max(times)) if times else None


class _Collector:
    def __init__(self, api: TrainingApi) -> None:
        self.api = api

    def collect(self):
        api = self.api
        samples = CounterMetricFamily("headroom_llmd_samples", "Training samples by where they went.",
                                      labels=["outcome"])
        for outcome in ("telemetry", "dead_letter"):
            samples.add_metric([outcome], api.outcomes[outcome])
        bodies = CounterMetricFamily("headroom_llmd_rejected_bodies", "Bulk bodies refused with a 422.")
        bodies.add_metric([], api.rejected_bodies)
        deliveries = CounterMetricFamily("headroom_llmd_deliveries", "What became of the records and dead letters "
                                         "sent to Kafka.", labels=["outcome"])
        for outcome, count in sorted(api.deliveries().items()):
            deliveries.add_metric([outcome], count)
        buckets = CounterMetricFamily("headroom_llmd_bucket_samples", "Samples received per target and stratum "
                                      "(the reference's queue × KV-cache × prefix buckets).",
                                      labels=["model", "queue_bucket", "cache_bucket", "prefix_bucket"])
        for (model, q, c, p), n in sorted(api.buckets.items()):
            buckets.add_metric([model, str(q), str(c), str(p)], n)
        version = GaugeMetricFamily("headroom_llmd_model_version", "Newest listed version per model key.",
                                    labels=["model_key"])
        holdout = GaugeMetricFamily("headroom_llmd_model_holdout", "Holdout metrics of the newest version.",
                                    labels=["model_key", "metric"])
        for key, shelved in sorted(api.shelf.models.items()):
            version.add_metric([key], shelved.update.version)
            for metric, value in sorted(shelved.update.holdout_metrics.items()):
                holdout.add_metric([key, metric], value)
        yield from (samples, bodies, deliveries, buckets, version, holdout)
