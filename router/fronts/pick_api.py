"""The plain gRPC ``Router`` API: ``Pick`` a server for a request, ``Report`` how it went.

An adapter only: proto → domain (headers, prompt, optional caller-supplied candidates) →
:class:`~router.control.service.RouterService` → proto. Domain errors map to status codes in :data:`STATUS_OF`
(an error takes the code of its nearest class there: :func:`status_of`).
Every input is checked before anything is scheduled or recorded, within the :mod:`router.control.limits`: a
candidate's values within the ranges of their kinds (:data:`contract.server_state.KIND_RANGES`), its
running TPOT SLOs positive milliseconds, its server id unique in the call, its address set and its
``encoder_matched_size`` no more than the request's ``encoder_input_size``; a report's
measurements as the telemetry validator takes them (an invalid report releases the request, which then
sends no telemetry). A picked request waits for its report in a bounded table (oldest forgotten first, its
in-flight accounting released). ``Report`` writes telemetry with latencies the caller measured, so it is open
only to authenticated callers (:attr:`router.fronts.auth.TelemetryTrust.reports`); otherwise a report is refused
with ``PERMISSION_DENIED`` (counted in ``headroom_router_unauthenticated_total{listener="report"}``) and its
request released.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Any

import grpc

from headroom.contract.server_state import KIND_RANGES, MAX_COUNT, MAX_LATENCY_MS, SERVER_FIELDS, encoder_excess
from headroom.contract.telemetry import InvalidRecord, check_field
from headroom.router.control.headers import parse_headers
from headroom.router.control.metering import Completion
from headroom.router.control.prompt import PromptInfo, parse_body_off_loop
from headroom.router.control.service import Dispatch, RouterService
from headroom.router.errors import AdmissionRejected, NoCandidates, RequestError, RouterError
from headroom.router.framework.roles import ServerSnapshot
from headroom.router.proto import router_pb2, router_pb2_grpc

STATUS_OF: dict[type[RouterError], grpc.StatusCode] = {
    RequestError: grpc.StatusCode.INVALID_ARGUMENT,  # InvalidJson and RequestTooLarge too
    AdmissionRejected: grpc.StatusCode.RESOURCE_EXHAUSTED,
    NoCandidates: grpc.StatusCode.UNAVAILABLE,
}


def status_of(err: RouterError) -> grpc.StatusCode:
    """The code of ``err``'s nearest class in :data:`STATUS_OF` (``INTERNAL`` for none: the router's own failure)."""
    return next((STATUS_OF[cls] for cls in type(err).__mro__ if cls in STATUS_OF), grpc.StatusCode.INTERNAL)


REPORT_CLOSED = ("Report is closed: it writes telemetry, and this router authenticates none of its callers (set "
                 "HEADROOM_ROUTER_AUTH_TOKENS_FILE or HEADROOM_TLS_CLIENT_CA_FILE)")


class PickServicer(router_pb2_grpc.RouterServicer):
    def __init__(self, service: RouterService, max_pending: int = 100_000, *, reports: bool = True):
        """``reports``: whether ``Report`` is open (:attr:`router.fronts.auth.TelemetryTrust.reports`)."""
        self.service = service
        self.max_pending = max_pending
        self.reports = reports
        self.pending: OrderedDict[str, Dispatch] = OrderedDict()

    async def Pick(self, request: router_pb2.PickRequest, context: grpc.aio.ServicerContext) -> router_pb2.PickResponse:
        try:
            body = await parse_body_off_loop(request.body, request.chat, self.service.limits) if request.body else None
            dispatch = self._pick(request, body and body[1])
        except RouterError as err:
            await context.abort(status_of(err), str(err))
        self.pending[dispatch.request.request_id] = dispatch
        while len(self.pending) > self.max_pending:
            _, old = self.pending.popitem(last=False)
            self.service.abandon(old, "never-reported")
        return response_of(dispatch)

    async def Report(self, request: router_pb2.ReportRequest, context: grpc.aio.ServicerContext) -> router_pb2.ReportResponse:
        dispatch = self.pending.pop(request.request_id, None)
        if not self.reports:
            if dispatch is not None:
                self.service.abandon(dispatch, "report-refused")
            self.service.metrics.child(self.service.metrics.unauthenticated, "report").inc()
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, REPORT_CLOSED)
        if dispatch is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"request {request.request_id!r} is not awaiting a report")
            raise AssertionError("abort raises")  # grpc's abort never returns
        if request.failed:
            self.service.abandon(dispatch, "reported-failed")
            return router_pb2.ReportResponse(telemetry_sent=False)
        try:
            completion = completion_of(request)
        except InvalidRecord as err:
            self.service.abandon(dispatch, "invalid-report")
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"report of {request.request_id!r}: {err.reason}")
            raise AssertionError("abort raises") from err
        return router_pb2.ReportResponse(telemetry_sent=self.service.complete(dispatch, completion) is not None)

    def _pick(self, request: router_pb2.PickRequest, parsed: PromptInfo | None) -> Dispatch:
        """Pick a server for ``request``, whose body (if it has one) is ``parsed`` already."""
        if not request.request_id:
            raise RequestError("request_id must be set")
        if request.request_id in self.pending:
            raise RequestError(f"request_id {request.request_id!r} is already awaiting a report")
        limits = self.service.limits
        headers = parse_headers(dict(request.headers))
        if parsed is not None:
            prompt = parsed
        else:
            if not 1 <= request.prompt_tokens <= MAX_COUNT or not 0 <= request.max_tokens <= MAX_COUNT:
                raise RequestError(f"prompt_tokens must be within [1, {MAX_COUNT}] and max_tokens within [0, "
                                   f"{MAX_COUNT}], got {request.prompt_tokens} and {request.max_tokens}")
            limits.check_block_hashes(len(request.block_hashes), "block_hashes")
            prompt = PromptInfo(request.prompt_tokens, request.max_tokens, request.stream, tuple(request.block_hashes),
                                tuple(dict.fromkeys(request.media_hashes)))
        limits.check_candidates(len(request.candidates))
        servers = [snapshot_of(s) for s in request.candidates] or None
        repeated = [sid for sid, n in Counter(s.server_id for s in servers or ()).items() if n > 1]
        if repeated:
            raise RequestError(f"candidate server_id {repeated[0]!r} appears more than once")
        scheduled = self.service.request_of(request.request_id, headers, prompt)
        for server in servers or ():
            if excess := encoder_excess(server.encoder_matched_size, scheduled.encoder_input_size):
                raise RequestError(f"candidate {server.server_id!r}: {next(iter(excess.values()))} (the request's "
                                   "distinct media items)")
        return self.service.pick(scheduled, servers)


def snapshot_of(state: router_pb2.ServerState) -> ServerSnapshot:
    """The snapshot of a caller's candidate: the message's fields carry the names of the snapshot's, and a
    field of the server's state that the message leaves unset takes the contract's default."""
    if not state.server_id:
        raise RequestError("every candidate needs a server_id")
    if not state.address:
        raise RequestError(f"candidate {state.server_id!r} needs an address")
    slos = tuple(state.running_tpot_slos_ms)
    if not all(0.0 < slo <= MAX_LATENCY_MS for slo in slos):
        raise RequestError(f"candidate {state.server_id!r}: running_tpot_slos_ms must be positive milliseconds up "
                           f"to {MAX_LATENCY_MS:.0f}, got {[slo for slo in slos if not 0.0 < slo <= MAX_LATENCY_MS][0]}")
    values: dict[str, Any] = {}
    for name, raw in SERVER_FIELDS.items():
        if name not in _OPTIONAL or state.HasField(name):
            value = _checked(state, name, raw.kind)
            values[name] = value if raw.cap is None else min(raw.cap, value)
    return ServerSnapshot(
        server_id=state.server_id, address=state.address, pool_key=state.pool_key or "default",
        running_tpot_slos_ms=slos, tpot_at_risk=_checked(state, "tpot_at_risk", "count"),
        metrics_age_s=_checked(state, "metrics_age_s", "latency"), **values)


_OPTIONAL = {f.name for f in router_pb2.ServerState.DESCRIPTOR.fields if f.has_presence}


def _checked(state: router_pb2.ServerState, name: str, kind: str) -> float:
    value: float = getattr(state, name)
    low, high = KIND_RANGES[kind]
    if not low <= value <= high:  # NaN is never within
        raise RequestError(f"candidate {state.server_id!r}: {name} must be within [{low:g}, {high:g}], got {value}")
    return value


def completion_of(report: router_pb2.ReportRequest) -> Completion:
    """What a report measured, each value as the telemetry validator takes it; raises :class:`InvalidRecord`."""
    def optional(name: str) -> float | None:
        return float(check_field(name, getattr(report, name))) if report.HasField(name) else None

    return Completion(e2e_ms=check_field("e2e_ms", report.e2e_ms),
                      output_tokens=check_field("output_tokens", report.output_tokens),
                      prompt_tokens=check_field("prompt_tokens", report.prompt_tokens) or None,
                      ttft_ms=optional("ttft_ms"), tpot_ms=optional("tpot_ms"))


def response_of(dispatch: Dispatch) -> router_pb2.PickResponse:
    decision = dispatch.decision
    scores = {s.candidate.server.server_id: s.score for s in decision.scored}
    results = []
    for cand in decision.candidates:
        p = cand.prediction
        results.append(router_pb2.CandidateResult(
            server_id=cand.server.server_id, predicted=p is not None,
            predicted_ttft_ms=p.ttft_ms if p else 0.0, predicted_tpot_ms=p.tpot_ms if p else 0.0,
            ttft_headroom_ms=cand.ttft_headroom_ms, tpot_headroom_ms=cand.tpot_headroom_ms,
            score=scores.get(cand.server.server_id), fallback_reason=cand.fallback_reason or ""))
    chosen = decision.chosen
    versions = dict(chosen.prediction.versions) if chosen and chosen.prediction else {}
    return router_pb2.PickResponse(
        server_id=dispatch.server.server_id, address=dispatch.server.address, profile=decision.profile,
        fallback=decision.fallback or "", fallback_reasons=list(decision.fallback_reasons), candidates=results,
        model_versions=versions)
