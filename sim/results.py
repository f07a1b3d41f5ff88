"""What a pool run returns, the one outcome → telemetry record function, and the quantile of latencies."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

from headroom.contract.server_state import ServerState, state_values
from headroom.contract.telemetry import TelemetryRecord
from headroom.sim.records import Dropped, MetricsSnapshot, Outcome
from headroom.sim.view import Pick, PickResult


class Dispatched(NamedTuple):
    """What the router saw when it dispatched a request: the server's state and pool key, the virtual time,
    and its decision."""

    state: ServerState
    pool_key: str
    dispatch_s: float
    decision: PickResult


@dataclass
class RunResult:
    """Everything a run produced. ``records`` are built on first access (one per completed request, in
    completion order), so runs that only need outcomes do not pay for them; empty when the run kept no
    telemetry."""

    outcomes: list[Outcome]
    dropped: list[Dropped]
    metrics: list[MetricsSnapshot]
    end_s: float  # virtual time of the last event
    wall_s: float  # wall-clock seconds the run took
    servers: dict[str, str] = field(default_factory=dict)  # server id -> final state
    dispatches: list[Dispatched] = field(default_factory=list, repr=False)  # what the router saw, per outcome
    epoch_unix: float = 0.0

    @cached_property
    def records(self) -> list[TelemetryRecord]:
        if not self.dispatches:
            return []
        return [telemetry_record(outcome, seen, self.epoch_unix)
                for outcome, seen in zip(self.outcomes, self.dispatches)]


def telemetry_record(outcome: Outcome, seen: Dispatched, epoch_unix: float) -> TelemetryRecord:
    """The telemetry record of one outcome; ``seen`` is what the router saw at dispatch. Its latencies run from the
    dispatch, as the router measures them: the server's, without any time the request was held at the router."""
    request = outcome.request
    stream = request.stream
    predicted = seen.decision if type(seen.decision) is Pick else None
    held_ms = (seen.dispatch_s - request.arrival_s) * 1000.0
    return TelemetryRecord(
        **state_values(seen.state), request_id=request.request_id, server_id=outcome.server_id,
        pool_key=seen.pool_key, stream=stream, arrival_ts=epoch_unix + request.arrival_s,
        dispatch_ts=epoch_unix + seen.dispatch_s, completion_ts=epoch_unix + outcome.completion_s,
        prompt_tokens=request.prompt_tokens, output_tokens=outcome.output_tokens, e2e_ms=outcome.e2e_ms - held_ms,
        max_tokens=request.max_tokens, ttft_ms=outcome.ttft_ms - held_ms if stream else None,
        tpot_ms=outcome.tpot_ms if stream else None,
        predicted_ttft_ms=predicted.predicted_ttft_ms if predicted else None,
        predicted_tpot_ms=predicted.predicted_tpot_ms if predicted else None,
        predicted_e2e_ms=predicted.predicted_e2e_ms if predicted else None,
        model_versions=predicted.model_versions if predicted else None,
        slo_ttft_ms=request.slo_ttft_ms, slo_tpot_ms=request.slo_tpot_ms, priority=request.priority)


def quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (the smallest value with at least ``q`` of the values at or below it)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]
