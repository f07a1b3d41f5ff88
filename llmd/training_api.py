"""llm-d's training server API: its samples become telemetry; its model routes read ``model-updates``.

Routes (the reference's paths, fields and status codes):

- ``POST /add_training_data_bulk`` ``{"entries": [entry, ...]}`` → 202 ``{"message": "Accepted N training
  samples.", "telemetry": k, "dead_lettered": m, "refused": [{"index", "reason"}, ...]}``. The body is
  checked as the reference checks it (any invalid entry → 422 with FastAPI's body, nothing sent); each entry
  then becomes one telemetry record (:func:`headroom.llmd_terms.sample_record`) sent to the ``telemetry`` topic,
  where the worker's windows, drift detectors, promotion gate and model updates take it like any other. An
  entry that the telemetry contract refuses, or that the worker would refuse for its time
  (:func:`llmd.intake.refusal`), goes to the dead-letter topic with its reason (headers
  :data:`~contract.topics.REASON_HEADER`, :data:`~contract.topics.SOURCE_HEADER`) and is listed in the answer
  (the first :data:`LISTED_REFUSALS`) and counted by reason: nothing is taken and dropped later in silence. A
  call beyond the intake bounds is refused whole with 429 and ``Retry-After`` (:class:`llmd.intake.Intake`).
- ``POST /flush`` (the reference's body: ``flush_training_data``, ``flush_test_data``, ``flush_metrics``,
  ``reason``) → the reference's answer. Flushing the training data asks the worker to forget every row of the
  pool and its roles completed before now (:mod:`contract.window_forget`), once the samples sent before have
  reached the broker; the holdout rows are the newest rows of those windows and go with them. Flushing the
  metrics hides the holdout scores of the versions published so far from ``/metrics``.
- ``GET /healthz``; ``GET /readyz`` (200 once the broker has answered: the models on ``model-updates``
  have been read, 503 before); ``GET /metrics`` (:mod:`llmd.training_metrics`); ``GET /data/status``
  (samples sent since the start or the last flush, per target and per bucket of the reference's 5 × 20 × 4
  strata; what became of them; the intake; models published and refused); ``GET /``; the model routes of
  :mod:`llmd.model_routes`.

With bearer tokens (``HEADROOM_LLMD_TRAINING_AUTH_TOKENS_FILE``, :class:`router.fronts.auth.BearerTokens`) every
route but ``/healthz`` and ``/readyz`` requires one (401 otherwise, counted).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

import msgspec
from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CollectorRegistry, generate_latest

from headroom.contract.strata import kv_bucket, prefix_bucket, queue_bucket
from headroom.contract.telemetry import InvalidRecord
from headroom.contract.window_forget import Forget
from headroom.llmd.intake import RETRY_AFTER_S, Intake, refusal
from headroom.llmd.model_routes import MODEL_NAMES, MODEL_TYPE, ModelRoutes
from headroom.llmd.model_shelf import ModelShelf
from headroom.llmd.training_metrics import Collector, reference_lines
from headroom.llmd_terms import ROLES, pool_key_of, sample_record
from headroom.predictor.llmd_schema import (
    TrainingRow,
    Unprocessable,
    decode_rows,
    iso_time,
    json_response,
    row_dict,
    timestamp_of,
)
from headroom.router.control.telemetry_sink import TelemetrySink
from headroom.router.fronts.auth import HEADER, BearerTokens
from headroom.streams.settings import RecordTimes

LISTED_REFUSALS = 100  # refused entries named in one answer (all are counted)
OPEN_PATHS = frozenset({"/healthz", "/readyz"})  # answered without a token: probes carry none


class DeadLetterSink(Protocol):
    def send(self, key: bytes, value: bytes, reason: str, source: str) -> None: ...


class FlushRequest(msgspec.Struct, forbid_unknown_fields=False):
    flush_training_data: bool = True
    flush_test_data: bool = True
    flush_metrics: bool = True
    reason: str | None = None


class TrainingApi:
    def __init__(self, telemetry: TelemetrySink, dead_letters: DeadLetterSink, shelf: ModelShelf, *,
                 pool_key: str = "default", objective: str = "quantile", times: RecordTimes | None = None,
                 transit_s: float = 60.0, intake: Intake | None = None, tokens: BearerTokens | None = None,
                 forget: Callable[[list[Forget]], int] | None = None, clock: Callable[[], float] = time.time,
                 deliveries: Callable[[], dict[str, int]] | None = None) -> None:
        self.telemetry, self.dead_letters, self.shelf = telemetry, dead_letters, shelf
        self.deliveries = deliveries or dict  # what became of the records sent: delivered, failed, dropped
        self.pool_key, self.objective = pool_key, objective
        self.models = ModelRoutes(shelf, pool_key=pool_key, objective=objective, clock=clock)
        self.times, self.transit_s = times or RecordTimes(), transit_s
        self.intake = intake or Intake(max_pending=50_000, buffer_records=100_000, buffered=lambda: 0)
        self.tokens = tokens
        self._forget = forget  # sends requests to forget once earlier samples are delivered; returns those unsent
        self._clock = clock
        self.lock = threading.Lock()  # the counts below are written on the intake thread, read on the loop
        self.outcomes: Counter[str] = Counter()  # samples by where they went: "telemetry", "dead_letter"
        self.refused: Counter[str] = Counter()  # samples refused at once, by reason kind
        self.received: Counter[str] = Counter()  # since the start or the last flush, by target observed
        self.buckets: Counter[tuple[str, int, int, int]] = Counter()  # the same, by (target, queue, cache, prefix)
        self.buckets_total: Counter[tuple[str, int, int, int]] = Counter()  # since the start
        self.scores_after: dict[str, int] = {}  # model key -> version whose scores /flush hid (and all before)
        self.rejected_bodies = 0
        self.unauthenticated = 0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024,
                              middlewares=[self._authenticate] if self.tokens is not None else [])
        app.add_routes([web.post("/add_training_data_bulk", self.add_bulk), web.post("/flush", self.flush),
                        *self.health_routes(), web.get("/data/status", self.data_status), web.get("/", self.root),
                        *self.models.routes()])
        return app

    def health_routes(self) -> list[web.RouteDef]:
        """The routes a separate plain health port serves (``HEADROOM_LLMD_TRAINING_HEALTH_PORT``)."""
        return [web.get("/healthz", self.healthz), web.get("/readyz", self.readyz), web.get("/metrics", self.metrics)]

    @web.middleware
    async def _authenticate(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or self.tokens is None or self.tokens.allows(request.headers.get(HEADER)):
            return await handler(request)
        self.unauthenticated += 1
        response = json_response({"detail": "missing or invalid bearer token"}, 401)
        response.headers["WWW-Authenticate"] = "Bearer"
        return response

    # --- samples -----------------------------------------------------------------------------------
    async def add_bulk(self, request: web.Request) -> web.Response:
        if not self.intake.room():
            return self._busy()
        try:
            rows = decode_rows(await request.read(), "entries", TrainingRow)
        except Unprocessable as err:
            self.rejected_bodies += 1
            return json_response(err.body, 422)
        if not self.intake.admit(len(rows)):
            return self._busy()
        try:
            sent, refused = await self.intake.run(lambda: self.ingest(rows))
        finally:
            self.intake.done(len(rows))
        return json_response({"message": f"Accepted {len(rows)} training samples.", "telemetry": sent,
                              "dead_lettered": len(refused), "refused": refused[:LISTED_REFUSALS]}, 202)

    def ingest(self, rows: list[Any]) -> tuple[int, list[dict[str, Any]]]:
        """Send each row as a telemetry record, or as a dead letter with its reason; ``(sent, refused)``."""
        call, now = uuid.uuid4().hex[:16], self._clock()
        sent, refused, kinds = 0, [], Counter[str]()
        strata: list[tuple[str, int, int, int]] = []
        for index, row in enumerate(rows):
            sample = row_dict(row)
            request_id = f"llm-d-{call}-{index}"
            try:
                record = sample_record(sample, pool_key=self.pool_key, request_id=request_id, received_at=now,
                                       timestamp=timestamp_of(row.timestamp))
                late = refusal(record.completion_ts, now, self.times, self.transit_s)
                if late is not None:
                    raise InvalidRecord(late)
            except InvalidRecord as err:
                self.dead_letters.send(self.pool_key.encode(), msgspec.json.encode(sample), err.reason,
                                       f"llm-d/add_training_data_bulk/{request_id}")
                refused.append({"index": index, "reason": err.reason})
                kinds[_kind(err.reason)] += 1
                continue
            self.telemetry.send(record)
            sent += 1
            cell = (queue_bucket(record.num_waiting), kv_bucket(record.kv_cache_usage),
                    prefix_bucket(record.prefix_match))
            strata += [(target, *cell) for target, observed in (("ttft", record.ttft_ms), ("tpot", record.tpot_ms))
                       if observed is not None]
        with self.lock:
            self.outcomes.update(telemetry=sent, dead_letter=len(refused))
            self.refused.update(kinds)
            self.received.update(target for target, *_ in strata)
            self.buckets.update(strata)
            self.buckets_total.update(strata)
        return sent, refused

    def _busy(self) -> web.Response:
        response = json_response({"detail": f"too many training samples waiting ({self.intake.pending} of at most "
                                            f"{self.intake.max_pending}, HEADROOM_LLMD_MAX_PENDING_SAMPLES, or the "
                                            f"broker is behind): retry after {RETRY_AFTER_S} s"}, 429)
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
        return response

    # --- flush -------------------------------------------------------------------------------------
    async def flush(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            asked = msgspec.json.decode(body, type=FlushRequest) if body.strip() else FlushRequest()
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            return json_response({"detail": [{"type": "value_error", "loc": ["body"], "msg": str(err),
                                              "input": body.decode(errors="replace")[:1000]}]}, 422)
        now, counts = self._clock(), (0, 0)
        if asked.flush_training_data:
            reason = asked.reason or "llm-d /flush"
            forgets = [Forget(pool_key_of(self.pool_key, role), now, reason) for role in ROLES]
            unsent, counts = await self.intake.run(lambda: self._flush_windows(forgets))
            if unsent:
                return json_response({"detail": f"the broker has not acknowledged the samples sent before: nothing "
                                                f"flushed ({unsent} of {len(forgets)} requests to forget unsent); "
                                                f"retry"}, 503)
        if asked.flush_metrics:
            self.scores_after.update({key: m.update.version for key, m in self.shelf.models.items()})
        flushed = [f"{counts[0]} TTFT and {counts[1]} TPOT training samples (and the holdout rows among them)"] \
            if asked.flush_training_data else []
        flushed += ["the holdout scores of the versions published so far"] if asked.flush_metrics else []
        return json_response({
            "success": True, "flushed_at": iso_time(now), "reason": asked.reason,
            "ttft_training_samples_flushed": counts[0], "tpot_training_samples_flushed": counts[1],
            "ttft_test_samples_flushed": 0, "tpot_test_samples_flushed": 0, "metrics_cleared": asked.flush_metrics,
            "message": f"Successfully flushed: {', '.join(flushed)}" if flushed else "No data flushed"})

    def _flush_windows(self, forgets: list[Forget]) -> tuple[int, tuple[int, int]]:
        """On the intake thread, after the calls taken before: send ``forgets``; then the samples counted since
        the last flush, by target, and the counts reset. ``(requests unsent, (TTFT, TPOT samples))``."""
        unsent = self._forget(forgets) if self._forget is not None else len(forgets)
        if unsent:
            return unsent, (0, 0)
        with self.lock:
            counts = (self.received["ttft"], self.received["tpot"])
            self.received.clear()
            self.buckets.clear()
        return 0, counts

    # --- status ------------------------------------------------------------------------------------
    async def healthz(self, _request: web.Request) -> web.Response:
        return json_response({"status": "ok"})

    async def readyz(self, _request: web.Request) -> web.Response:
        if not self.shelf.caught_up.is_set():
            return json_response({"detail": "the broker has not answered yet"}, 503)
        return json_response({"status": "ready"})

    async def data_status(self, _request: web.Request) -> web.Response:
        with self.lock:
            ttft, tpot = self.received["ttft"], self.received["tpot"]
            distribution = {f"queue_{q}_cache_{c}_prefix_{p}": n for (model, q, c, p), n in sorted(self.buckets.items())
                            if model == "ttft"}
            outcomes, refused = dict(self.outcomes), dict(sorted(self.refused.items()))
        trained = {key: count for key, count in sorted(self.shelf.published.items()) if self.models.ours(key)}
        scored = Counter(key.split("/")[1] for key, m in self.shelf.models.items()
                         if self.models.ours(key) and m.update.holdout_metrics)
        return json_response({
            "training_data": {"ttft_samples": ttft, "tpot_samples": tpot, "total_samples": ttft + tpot},
            "test_data": {"ttft_samples": 0, "tpot_samples": 0, "total_samples": 0},  # holdout: inside the windows
            "ensemble": {"ensemble_mode": False, "ensemble_active": False},
            "metrics": {"ttft_scores_count": scored["ttft"], "tpot_scores_count": scored["tpot"]},
            "telemetry": {"records_sent": outcomes.get("telemetry", 0), "dead_lettered": outcomes.get("dead_letter", 0),
                          "refused": refused, "bodies_rejected": self.rejected_bodies,
                          "calls_refused_busy": self.intake.refused_calls,
                          "calls_unauthenticated": self.unauthenticated, **self.deliveries()},
            "intake": {"pending_samples": self.intake.pending, "max_pending_samples": self.intake.max_pending},
            "bucket_distribution": distribution,
            "models_trained": {"versions": sum(trained.values()), "by_model": trained,
                               "rejected": dict(sorted(self.shelf.rejected.items()))},
            "model_ready": self.models.ready(), "last_retrain": self._last_retrain()})

    async def metrics(self, _request: web.Request) -> web.Response:
        registry = CollectorRegistry()
        registry.register(Collector(self))
        body = generate_latest(registry) + ("\n".join(reference_lines(self)) + "\n").encode()
        return web.Response(body=body, content_type="text/plain", headers={"X-Content-Type-Options": "nosniff"},
                            charset="utf-8")

    async def root(self, _request: web.Request) -> web.Response:
        q = self.models.quantile()
        return json_response({"message": "headroom latency predictor (llm-d training API) is running",
                              "model_type": MODEL_TYPE, "objective_type": self.objective, "quantile": q,
                              "description": f"Predicting {q:.0%} quantile for TTFT and TPOT latencies"
                              if self.objective == "quantile" else "Predicting mean TTFT and TPOT latencies",
                              "pool_key": self.pool_key, "models": list(MODEL_NAMES)})

    def _last_retrain(self) -> str | None:
        times = [m.update.created_at for key, m in self.shelf.models.items() if self.models.ours(key)]
        return iso_time(max(times)) if times else None


def _kind(reason: str) -> str:
    """A short label for a refusal's reason, for counts."""
    if reason.startswith("timestamp"):
        return "too-old" if " old:" in reason else "too-far-ahead"
    return "invalid"
