"""The router's core service, shared by every interface (HTTP proxy, Pick API, Envoy ext_proc).

:meth:`RouterService.pick` turns a request into a :class:`Dispatch` (snapshots → engine → accounting)
or raises :class:`~router.errors.AdmissionRejected` / :class:`~router.errors.NoCandidates`; a front that can wait
calls :meth:`RouterService.place` instead, which holds a request at the router while the pipeline says so
(:mod:`router.control.held`);
:meth:`RouterService.complete` takes what was measured, releases the in-flight accounting, observes the
latency metrics, records how a stream's TPOT compared with its prediction (the pool's ``tpot_ratios``, which
the producer calibrates its TPOT verdict with) and how each latency compared with what the model predicted there
(the pool's ``corrections``, which the producer corrects each server's predictions with), and sends one telemetry
record carrying the model's prediction that was used (uncorrected: the residuals the worker's drift detectors
watch are the model's) (or, with a :class:`~router.control.telemetry_sampler.TelemetrySampler`, a stratified sample of them, each with its
weight);
:meth:`RouterService.streamed` notes tokens relayed from a server (a stream's first one teaches its TTFT at once,
not at the stream's end); :meth:`RouterService.abandon`
releases a request that failed. A proxied attempt that failed before its first byte is reported with
:meth:`RouterService.upstream_failed` (passive outlier detection) and may go to another server
(:meth:`RouterService.retry`); the record of the attempt that answers carries the retries and ejections.
Every dispatch is accounted in flight under a key of its own, so no request id — reused by a client or
not — can stand for another dispatch. All calls run on one event loop thread.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from headroom.contract.server_state import MAX_LATENCY_MS, state_values
from headroom.contract.strata import stratum_of
from headroom.contract.targets import response_ms, trains
from headroom.contract.telemetry import SCHEMA_VERSION, InvalidRecord, TelemetryRecord, validate
from headroom.feedback.latency_corrections import prefill_work
from headroom.router.control.headers import SchedulingHeaders
from headroom.router.control.held import HeldRequests
from headroom.router.control.limits import RequestLimits
from headroom.router.control.metering import Completion
from headroom.router.control.metrics import RouterMetrics
from headroom.router.control.prompt import PromptInfo
from headroom.router.control.telemetry_sampler import TelemetrySampler
from headroom.router.control.telemetry_sink import TelemetrySink
from headroom.router.errors import AdmissionRejected, RequestHeld
from headroom.router.framework.engine import Decision, Engine
from headroom.router.framework.roles import Context, LatencyPredictor, Request, ServerSnapshot
from headroom.router.state.pool import Finished, PoolState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Dispatch:
    """A request on its way to a server."""

    request: Request
    decision: Decision
    arrival_ts: float  # wall clock, unix seconds
    dispatch_ts: float
    dispatch_mono: float  # monotonic clock, for measuring
    key: str = ""  # the dispatch's in-flight key, unique in the router
    tried: tuple[str, ...] = ()  # servers the request went to before this one, which failed it
    ejections: int = 0  # servers its failed attempts ejected
    watched: bool = False  # its tokens are relayed through the router as they come, by a trusted caller
    held_ms: float = 0.0  # how long the router held it before sending it

    @property
    def server(self) -> ServerSnapshot:
        return self.decision.chosen.server  # type: ignore[union-attr]


class RouterService:
    def __init__(self, engine: Engine, pool: PoolState, telemetry: TelemetrySink, metrics: RouterMetrics,
                 *, predictor: LatencyPredictor | None = None, rng: random.Random | None = None,
                 sampler: TelemetrySampler | None = None,
                 monotonic: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time,
                 limits: RequestLimits = RequestLimits()):
        self.engine = engine
        self.pool = pool
        self.telemetry = telemetry
        self.metrics = metrics
        self.predictor = predictor
        self.rng = rng or random.Random()
        self.sampler = sampler
        self.monotonic = monotonic
        self.wall = wall
        self.limits = limits
        self.invalid_records = 0
        self.held = HeldRequests()
        self._dispatch_numbers = itertools.count(1)

    def request_of(self, request_id: str, headers: SchedulingHeaders, prompt: PromptInfo) -> Request:
        return Request(request_id=request_id, prompt_tokens=prompt.prompt_tokens, max_tokens=prompt.max_tokens,
                       stream=prompt.stream, slo_ttft_ms=headers.slo_ttft_ms, slo_tpot_ms=headers.slo_tpot_ms,
                       priority=headers.priority,
                       predict=self.engine.wants_prediction(headers.opted_in, headers.opted_out),
                       block_hashes=prompt.block_hashes, media_hashes=prompt.media_hashes)

    async def place(self, request: Request, *, watched: bool = False) -> Dispatch:
        """:meth:`pick` for a front that can wait: while the pipeline holds ``request``
        (:class:`~router.errors.RequestHeld`) it waits at the router, and is asked about again when its turn comes
        (:class:`HeldRequests`) or its wait ends."""
        arrival, started = self.wall(), self.monotonic()
        ticket, held_s = None, 0.0
        while True:
            try:
                dispatch = self.pick(replace(request, holdable=True, waited_ms=held_s * 1000.0), watched=watched,
                                     arrival=arrival)
            except RequestHeld as hold:
                if ticket is None:
                    ticket = self.held.ticket()
                    self.metrics.held.inc()
                self.metrics.holding.inc()
                try:
                    await self.held.wait(ticket, hold.for_s)
                finally:
                    self.metrics.holding.dec()
                held_s = self.monotonic() - started
                continue
            if ticket is not None:
                self.held.wake()  # the next oldest may go too
                dispatch = replace(dispatch, held_ms=held_s * 1000.0)
            return dispatch

    def pick(self, request: Request, servers: Sequence[ServerSnapshot] | None = None, *,
             retry_of: Dispatch | None = None, watched: bool = False, arrival: float | None = None) -> Dispatch:
        """Schedule ``request`` over the pool (or over the given ``servers``) and account the dispatch; a retry
        (``retry_of`` the dispatch that failed) goes to none of the servers tried already. When ``watched`` (its
        tokens will be relayed through the router as they come, by a trusted caller), a stream waits for its first
        token there with the model's prediction of it, and its server is priced by how late it is
        (:meth:`PoolState.dispatched`). ``arrival``: when the request reached the router (wall clock; default now).
        A ``holdable`` request may raise :class:`~router.errors.RequestHeld` instead (:meth:`place`)."""
        if retry_of is not None:
            arrival = retry_of.arrival_ts
        elif arrival is None:
            arrival = self.wall()
        started = time.perf_counter()
        now = self.monotonic()
        tried = () if retry_of is None else (*retry_of.tried, retry_of.server.server_id)
        if servers is None:
            servers = self.pool.snapshots(request, now, frozenset(tried))
        else:
            servers = self.pool.with_corrections(servers, now)
        context = Context(rng=self.rng, predictor=self.predictor, tpot_ratios=self.pool.tpot_ratios)
        decision = self.engine.decide(request, servers, context)
        m = self.metrics
        m.decision_latency.observe(time.perf_counter() - started)
        m.child(m.decisions, decision.profile).inc()
        if decision.heuristic_reason is not None:
            m.child(m.heuristic_decisions, decision.heuristic_reason).inc()
        elif decision.fallback_reasons:
            for reason in decision.fallback_reasons:
                m.child(m.partial_fallbacks, reason).inc()
        if decision.rejection is not None:
            m.rejections.inc()
            raise AdmissionRejected(decision.rejection)
        if decision.held is not None:
            raise RequestHeld(decision.held.reason, decision.held.for_ms / 1000.0)
        chosen = decision.chosen
        if chosen is not None and chosen.prediction is not None:
            for target, version in chosen.prediction.versions.items():
                m.child(m.model_version, target).set(version)
                self.pool.corrections.model_version(chosen.server.pool_key, target, version)
        request = decision.request  # held to the pool's default SLO when it sent none
        key = f"{request.request_id}#{next(self._dispatch_numbers)}"
        prediction = chosen.prediction  # type: ignore[union-attr]
        awaited = prediction.model_ms()["ttft"] if watched and request.stream and prediction is not None else None
        self.pool.dispatched(request, chosen.server.server_id, now, key, awaited)  # type: ignore[union-attr]
        return Dispatch(request, decision, arrival, self.wall(), now, key, tried,
                        0 if retry_of is None else retry_of.ejections, watched,
                        0.0 if retry_of is None else retry_of.held_ms)

    def retry(self, failed: Dispatch) -> Dispatch:
        """The same request on another server, after ``failed`` (already reported) failed before its first
        byte; raises :class:`~router.errors.NoCandidates` when no other server is left."""
        self.metrics.upstream_retries.inc()
        return self.pick(failed.request, retry_of=failed, watched=failed.watched)

    def upstream_failed(self, dispatch: Dispatch, reason: str) -> Dispatch:
        """Release a dispatch whose server failed it (``reason``: e.g. ``connect``, ``status-503``, ``first-byte-
        timeout``) and count the failure for outlier detection; returns the dispatch with any ejection counted."""
        self.abandon(dispatch, f"upstream-{reason}")
        server_id = dispatch.server.server_id
        self.metrics.upstream_failures.labels(reason).inc()
        until = self.pool.upstream_failed(server_id, self.monotonic())
        if until is None:
            return dispatch
        self.metrics.upstream_ejections.labels(server_id).inc()
        log.warning("server %s ejected for %.0f s after failing requests (last: %s)", server_id,
                    until - self.monotonic(), reason)
        return replace(dispatch, ejections=dispatch.ejections + 1)

    def complete(self, dispatch: Dispatch, completion: Completion, measured: bool = True, *,
                 trusted: bool = True) -> TelemetryRecord | None:
        """Finish a request that got a response; returns the telemetry record sent (None if unusable, sampled
        out, not ``measured``: a request scheduled without its body, whose prompt is unknown, or not ``trusted``:
        measured by a caller that was not authenticated, :class:`~router.fronts.auth.TelemetryTrust`)."""
        streamed = completion.output_tokens if dispatch.request.stream else 0  # the lengths streams run to
        finished = self.pool.completed(dispatch.key, streamed)
        self.held.wake()
        self.pool.upstream_succeeded(dispatch.server.server_id, self.monotonic())
        self._observe(dispatch, completion)
        if trusted:  # a caller's own say on latencies teaches the router nothing
            self._learn(dispatch, completion, finished)
        if not measured or not trusted:
            self.metrics.telemetry.labels("no_body" if not measured else "unauthenticated").inc()
            return None
        record = self._record(dispatch, completion)
        if record is not None and self.sampler is not None:
            weight = self.sampler.weight(stratum_of(record), record.completion_ts)
            if weight is None:
                self.metrics.telemetry.labels("sampled_out").inc()
                return None
            record = replace(record, sample_weight=weight)
        if record is not None:
            self.telemetry.send(record)
        return record

    def _learn(self, dispatch: Dispatch, done: Completion, finished: Finished) -> None:
        """How the request's TPOT or E2E compared with the predictions it was placed with, and its TTFT and the
        server's prefill pace if its first token taught nothing yet (a caller reporting the whole request at once);
        its TPOT only if its early TPOT did not already. A router without a predictor has nothing to correct or
        floor."""
        if self.predictor is None:
            return
        server, stream, now = dispatch.server, dispatch.request.stream, self.monotonic()
        if stream and done.ttft_ms is not None and finished.first_unseen:
            self._learn_first_token(dispatch, done.ttft_ms, now)
        prediction = dispatch.decision.chosen.prediction  # type: ignore[union-attr]
        if prediction is None:
            return
        if stream and done.tpot_ms is not None:
            self.pool.tpot_ratios.add(server.pool_key, prediction.tpot_ms, done.tpot_ms)
        model_ms = prediction.model_ms()
        for target, actual in (("tpot", None if finished.early_tpot_timed else done.tpot_ms), ("e2e", done.e2e_ms)):
            predicted, version = model_ms[target], prediction.versions.get(target)
            if trains(target, stream) and predicted is not None and actual is not None and version is not None:
                self.pool.corrections.observe(server.server_id, server.pool_key, target, predicted, actual, version,
                                              now)

    def _learn_first_token(self, dispatch: Dispatch, ttft_ms: float, now: float) -> None:
        """A stream's first token came ``ttft_ms`` after dispatch: the server's prefill pace, and its TTFT against
        the model's prediction."""
        server, prediction = dispatch.server, dispatch.decision.chosen.prediction  # type: ignore[union-attr]
        work = prefill_work(dispatch.request.prompt_tokens, server.inflight_prefill_tokens, server.prefix_match)
        predicted = None if prediction is None else prediction.model_ms()["ttft"]
        version = None if prediction is None else prediction.versions.get("ttft")
        self.pool.corrections.first_token(server.server_id, server.pool_key, ttft_ms, work, predicted, version, now)

    def idle_s(self, server_id: str) -> Callable[[], float]:
        """Seconds since ``server_id`` last made progress the router saw, asked when needed."""
        return lambda: self.pool.idle_s(server_id, self.monotonic())

    def streamed(self, dispatch: Dispatch, now: float, events: int = 1, *, trusted: bool = True) -> None:
        """``events`` chunks of the request's text went by at ``now`` (monotonic): the server's step rhythm, the
        stream's progress against its TPOT SLO, and its prompt no longer counts as prefill queued there (from
        its first tokens on). When ``trusted`` (as :meth:`complete`), the first ones teach the router the
        stream's TTFT there at once, and the next ones its TPOT (:class:`~router.state.inflight.Relayed`)."""
        relayed = self.pool.token(dispatch.key, now, events)
        if relayed.first is not None:
            self.held.wake()
        if trusted and self.predictor is not None:
            if relayed.first is not None:
                self._learn_first_token(dispatch, (now - dispatch.dispatch_mono) * 1000.0, now)
            elif relayed.early_tpot_ms is not None:
                self._learn_early_tpot(dispatch, relayed.early_tpot_ms, now)
        self.pool.token_seen(dispatch.server.server_id, now)

    def _learn_early_tpot(self, dispatch: Dispatch, tpot_ms: float, now: float) -> None:
        """The stream's first tokens after its first came ``tpot_ms`` apart: its TPOT against the model's
        prediction."""
        server, prediction = dispatch.server, dispatch.decision.chosen.prediction  # type: ignore[union-attr]
        if prediction is None:
            return
        predicted, version = prediction.model_ms()["tpot"], prediction.versions.get("tpot")
        if predicted is not None and version is not None:
            self.pool.corrections.observe(server.server_id, server.pool_key, "tpot", predicted, tpot_ms, version, now)

    def abandon(self, dispatch: Dispatch, kind: str) -> None:
        """Release a request that failed (``kind`` labels the error metric)."""
        self.pool.completed(dispatch.key)
        self.held.wake()
        self.metrics.request_errors.labels(kind).inc()

    def _observe(self, dispatch: Dispatch, done: Completion) -> None:
        request, m = dispatch.request, self.metrics
        prediction = dispatch.decision.chosen.prediction  # type: ignore[union-attr]
        first_ms = response_ms(request.stream, done.ttft_ms, done.e2e_ms) + dispatch.held_ms  # as the client waited
        m.ttft.observe(first_ms / 1000.0)
        if prediction is not None:
            m.predicted_ttft.observe(prediction.response_ms(request.stream) / 1000.0)
        if done.tpot_ms is not None:
            m.tpot.observe(done.tpot_ms / 1000.0)
            if prediction is not None:
                m.predicted_tpot.observe(prediction.tpot_ms / 1000.0)
        if request.slo_ttft_ms is not None and first_ms > request.slo_ttft_ms:
            m.ttft_violations.inc()
        if request.slo_tpot_ms is not None and done.tpot_ms is not None and done.tpot_ms > request.slo_tpot_ms:
            m.tpot_violations.inc()

    def _record(self, dispatch: Dispatch, done: Completion) -> TelemetryRecord | None:
        request, server = dispatch.request, dispatch.server
        prediction = dispatch.decision.chosen.prediction  # type: ignore[union-attr]
        fields = dict(
            state_values(server), request_id=request.request_id, server_id=server.server_id,
            pool_key=server.pool_key, stream=request.stream, arrival_ts=dispatch.arrival_ts,
            dispatch_ts=dispatch.dispatch_ts, completion_ts=dispatch.dispatch_ts + done.e2e_ms / 1000.0,
            prompt_tokens=done.prompt_tokens if done.prompt_tokens else request.prompt_tokens,
            output_tokens=done.output_tokens, e2e_ms=done.e2e_ms, max_tokens=request.max_tokens,
            encoder_input_size=request.encoder_input_size,
            ttft_ms=done.ttft_ms if request.stream else None, tpot_ms=done.tpot_ms if request.stream else None,
            slo_ttft_ms=request.slo_ttft_ms, slo_tpot_ms=request.slo_tpot_ms, priority=request.priority,
            retries=len(dispatch.tried), ejections=dispatch.ejections)
        if prediction is not None:  # a prediction beyond the plausible reads as the bound, not as a lost record
            model = prediction.model_ms()
            fields.update(predicted_ttft_ms=_plausible(model["ttft"]), predicted_tpot_ms=_plausible(model["tpot"]),
                          predicted_e2e_ms=_plausible(model["e2e"]), model_versions=dict(prediction.versions) or None)
        try:
            return validate({"v": SCHEMA_VERSION, **{k: v for k, v in fields.items() if v is not None}})
        except InvalidRecord as err:
            self.invalid_records += 1
            self.metrics.telemetry.labels("unusable").inc()
            log.info("request %s: no telemetry record: %s", request.request_id, err.reason)
            return None


def _plausible(milliseconds: float | None) -> float | None:
    return None if milliseconds is None else min(milliseconds, MAX_LATENCY_MS)
