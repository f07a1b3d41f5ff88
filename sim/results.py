"""What a pool run returns, the one outcome → telemetry record function, and the quantile of latencies."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from headroom.contract.telemetry import TelemetryRecord
from headroom.sim.records import Dropped, Outcome, ServerSnapshot
from headroom.sim.view import Pick


@dataclass
class RunResult:
    """Everything a run produced. ``records`` are built on first access (one per completed request, in
    completion order), so runs that only need outcomes do not pay for them; empty when the run kept no
    telemetry."""

    outcomes: list[Outcome]
    dropped: list[Dropped]
    metrics: list[ServerSnapshot]
    end_s: float  # virtual time of the last event
    wall_s: float  # wall-clock seconds the run took
    servers: dict[str, str] = field(default_factory=dict)  # server id -> final state
    dispatches: list[tuple] = field(default_factory=list, repr=False)  # what the router saw, per outcome
    epoch_unix: float = 0.0

    @cached_property
    def records(self) -> list[TelemetryRecord]:
        if not self.dispatches:
            return []
        return [telemetry_record(outcome, seen, self.epoch_unix)
                for outcome, seen in zip(self.outcomes, self.dispatches)]


def telemetry_record(outcome: Outcome, seen: tuple, epoch_unix: float) -> TelemetryRecord:
    """The telemetry record of one outcome; ``seen`` is the router's view of the server at dispatch."""
    request = outcome.request
    snap, match, inflight, inflight_tokens, prefill_tokens, (token_age, token_interval), dispatch_s, decision = seen
    stream = request.stream
    ttft = tpot = None
    if stream:
        ttft, tpot = outcome.ttft_ms, outcome.tpot_ms
    predicted = decision if type(decision) is Pick else None
    return TelemetryRecord(
        request.request_id, outcome.server_id, snap.pool_key, stream, epoch_unix + request.arrival_s,
        epoch_unix + dispatch_s, epoch_unix + outcome.completion_s, request.prompt_tokens, outcome.output_tokens,
        snap.kv_cache_usage, snap.num_waiting, snap.num_running, match, inflight, inflight_tokens,
        outcome.e2e_ms, request.max_tokens, prefill_tokens, token_age, token_interval, ttft, tpot,
        predicted.predicted_ttft_ms if predicted else None, predicted.predicted_tpot_ms if predicted else None,
        predicted.predicted_e2e_ms if predicted else None, predicted.model_versions if predicted else None,
        request.slo_ttft_ms, request.slo_tpot_ms, request.priority)


def quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (the smallest value with at least ``q`` of the values at or below it)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
