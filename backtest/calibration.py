"""Calibrating the policy comparison to the record: the simulator's speed per server and period, fitted so
that the recorded assignment, replayed, takes as long as it took.

The pool is the recorded one (a server per recorded ``server_id``, of the profile its pool key names, or
``server_type``). Each request goes to the server it went to in service (:func:`recorded_pick`); the
record's span is cut into periods of ``period_s``; per server and period, the speed factor is multiplied by
the median ratio of recorded to simulated time per output token (streaming TPOT, else E2E per token) and
the replay runs again, ``rounds`` times. A period with too few requests on a server keeps the factor of
the period before it. The fitted factors become slow-downs applied at the start of each
period (:data:`Calibration.actions`), for every policy of the comparison alike.

The calibration line is the recorded assignment's simulated TTFT p50 / p99 against the recorded ones; a
comparison whose gap exceeds ``tolerance`` (a ratio) is not to scale, and its policies are not ranked.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from headroom.backtest.scalars import number
from headroom.sim.pool import Action, SimServerSpec, run, slow_down
from headroom.sim.profile import PROFILES, profile
from headroom.sim.request import SimRequest
from headroom.sim.results import RunResult, quantile
from headroom.sim.view import Pick, PickFunction, PoolView

MIN_SAMPLES = 5  # per server and period, to move its factor
FACTOR_RANGE = (0.2, 10.0)


@dataclass(frozen=True)
class Calibration:
    pool: list[SimServerSpec]
    actions: list[Action]  # slow-downs per server at the start of each period
    factors: pl.DataFrame  # server_id, period_start_s, factor
    gap: pl.DataFrame  # metric, recorded_ms, simulated_ms, ratio
    worst_ratio: float  # the largest of ratio and 1/ratio over the gap's metrics
    tolerance: float
    replay: RunResult  # the recorded assignment, simulated with the fitted factors

    @property
    def to_scale(self) -> bool:
        return self.worst_ratio <= self.tolerance


def recorded_pool(records: pl.DataFrame, server_type: str) -> list[SimServerSpec]:
    """A simulated server per recorded server, of the profile its pool key names (else ``server_type``)."""
    servers = records.group_by("server_id").agg(pl.col("pool_key").first()).sort("server_id")
    return [SimServerSpec(sid, profile(key if key in PROFILES else server_type), key)
            for sid, key in servers.iter_rows()]


def recorded_pick(records: pl.DataFrame) -> PickFunction:
    """Each request to the server it went to in service."""
    server_of = dict(records.select(["request_id", "server_id"]).iter_rows())

    def pick(request: SimRequest, view: PoolView) -> Pick:
        return Pick(server_of[request.request_id])

    return pick


def calibrate(records: pl.DataFrame, requests: Sequence[SimRequest], server_type: str = "h100", *, seed: int = 0,
              period_s: float = 15.0, rounds: int = 3, tolerance: float = 1.5) -> Calibration:
    """Fit per-server, per-period speed factors to ``records`` (see the module docstring)."""
    pool = recorded_pool(records, server_type)
    start = number(records.get_column("arrival_ts").min(), "the first arrival_ts")
    span = number(records.get_column("completion_ts").max(), "the last completion_ts") - start
    periods = [i * period_s for i in range(max(1, math.ceil(span / period_s)))]
    recorded = _per_token(records, start, period_s)
    factors = {(spec.server_id, p): 1.0 for spec in pool for p in periods}
    pick = recorded_pick(records)
    for round_ in range(rounds + 1):
        actions = [(p, slow_down(sid, f)) for (sid, p), f in sorted(factors.items(), key=lambda kv: kv[0][1])]
        result = run(requests, pool, pick, seed=seed, telemetry=False, actions=actions)
        if round_ == rounds:
            break
        simulated = _simulated_per_token(result, period_s)
        for spec in pool:
            previous = None
            for p in periods:
                key = (spec.server_id, p)
                seen, sim = recorded.get(key, []), simulated.get(key, [])
                if len(seen) >= MIN_SAMPLES and len(sim) >= MIN_SAMPLES:
                    ratio = statistics.median(seen) / max(statistics.median(sim), 1e-9)
                    factors[key] = min(max(factors[key] * ratio, FACTOR_RANGE[0]), FACTOR_RANGE[1])
                elif previous is not None:  # too few requests to tell: as fast as it last was
                    factors[key] = previous
                previous = factors[key]
    gap = _gap(records, result)
    worst = max((max(r, 1 / r) for r in gap.get_column("ratio").to_list() if r == r and r > 0), default=math.inf)
    return Calibration(pool, actions, pl.DataFrame([{"server_id": s, "period_start_s": p, "factor": f}
                                                    for (s, p), f in sorted(factors.items())]),
                       gap, worst, tolerance, result)


def _per_token(records: pl.DataFrame, start: float, period_s: float) -> dict[tuple[str, float], list[float]]:
    """Recorded time per output token by (server, period): TPOT of streams, E2E per token otherwise."""
    out: dict[tuple[str, float], list[float]] = defaultdict(list)
    for sid, arrival, stream, tpot, e2e, tokens in records.select(
            ["server_id", "arrival_ts", "stream", "tpot_ms", "e2e_ms", "output_tokens"]).iter_rows():
        value = tpot if stream and tpot is not None else e2e / max(tokens, 1)
        out[(sid, math.floor((arrival - start) / period_s) * period_s)].append(value)
    return out


def _simulated_per_token(result: RunResult, period_s: float) -> dict[tuple[str, float], list[float]]:
    out: dict[tuple[str, float], list[float]] = defaultdict(list)
    for o in result.outcomes:
        value = o.tpot_ms if o.request.stream and o.tpot_ms is not None else o.e2e_ms / max(o.output_tokens, 1)
        out[(o.server_id, math.floor(o.request.arrival_s / period_s) * period_s)].append(value)
    return out


def _gap(records: pl.DataFrame, result: RunResult) -> pl.DataFrame:
    """Recorded against simulated first-response time (TTFT of streams, E2E otherwise) and TPOT."""
    first = records.select(pl.when(pl.col("stream")).then(pl.col("ttft_ms")).otherwise(pl.col("e2e_ms")))
    recorded_first = first.to_series().drop_nulls().to_list()
    recorded_tpot = records.get_column("tpot_ms").drop_nulls().to_list()
    simulated_first = [o.ttft_ms if o.request.stream else o.e2e_ms for o in result.outcomes]
    simulated_tpot = [o.tpot_ms for o in result.outcomes if o.request.stream and o.tpot_ms is not None]
    rows = []
    for metric, recorded, simulated, q in (("TTFT p50", recorded_first, simulated_first, 0.5),
                                           ("TTFT p99", recorded_first, simulated_first, 0.99),
                                           ("TPOT p50", recorded_tpot, simulated_tpot, 0.5)):
        r, s = quantile(recorded, q), quantile(simulated, q)
        rows.append({"metric": metric, "recorded_ms": r, "simulated_ms": s,
                     "ratio": s / r if r and r == r and s == s else math.nan})
    return pl.DataFrame(rows)
