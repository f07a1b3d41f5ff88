"""Policy comparison: the recorded arrivals replayed through the offline simulator under several policies.

Each telemetry record becomes a :class:`sim.request.SimRequest` with its arrival time (relative to the first),
prompt and output tokens, output cap, stream flag, SLOs and priority. Records carry no prompt prefix
hashes, so replayed requests share no cached prefixes: prefix-aware effects are not reproduced.

The pool is the recorded one, its speed per server and period calibrated to the record
(:mod:`backtest.calibration`), so every policy meets the slow-downs and load the recorded run met; the
recorded assignment replayed (``recorded, simulated``) shows how far the simulator is from the record, and
policies are ranked only when that gap is within tolerance. With ``servers`` set to another count, the
pool is that many uniform servers, uncalibrated and unranked.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import polars as pl

from headroom.backtest.calibration import Calibration, calibrate
from headroom.backtest.router_policy import engine_pick
from headroom.backtest.scalars import number
from headroom.router.framework.roles import LatencyPredictor
from headroom.sim.policies import POLICIES, policy
from headroom.sim.pool import run, uniform_pool
from headroom.sim.records import Outcome
from headroom.sim.request import SimRequest
from headroom.sim.results import quantile
from headroom.sim.view import PickFunction

REPLAYED = "recorded, simulated"  # the recorded assignment through the calibrated simulator
PREDICTED = "predicted-latency"  # the router's own pipeline, with the latest published models
KNOWN_POLICIES = (*POLICIES, PREDICTED)
DEFAULT_POLICIES = ("round-robin", "least-queue", "composite", PREDICTED)
OUTCOME_SCHEMA = pl.Schema({"policy": pl.String, "request_id": pl.String, "ttft_ms": pl.Float64,
                            "tpot_ms": pl.Float64, "met_slo": pl.Boolean, "has_slo": pl.Boolean})


def requests_from(records: pl.DataFrame) -> list[SimRequest]:
    """The recorded arrivals as simulator requests, in arrival order."""
    ordered = records.sort("arrival_ts")
    start = number(ordered.get_column("arrival_ts").min(), "the first arrival_ts") if ordered.height else 0.0
    return [SimRequest(request_id=r["request_id"], arrival_s=r["arrival_ts"] - start,
                    prompt_tokens=max(r["prompt_tokens"], 1), output_tokens=max(r["output_tokens"], 1),
                    max_tokens=r["max_tokens"], stream=r["stream"], slo_ttft_ms=r["slo_ttft_ms"],
                    slo_tpot_ms=r["slo_tpot_ms"], priority=r["priority"])
            for r in ordered.select(["request_id", "arrival_ts", "prompt_tokens", "output_tokens", "max_tokens",
                                     "stream", "slo_ttft_ms", "slo_tpot_ms", "priority"]).iter_rows(named=True)]


def met(ttft_ms: float, tpot_ms: float | None, slo_ttft_ms: float | None, slo_tpot_ms: float | None) -> bool:
    """Whether a request met every SLO it stated (one without SLOs meets them trivially)."""
    return ((slo_ttft_ms is None or ttft_ms <= slo_ttft_ms)
            and (slo_tpot_ms is None or tpot_ms is None or tpot_ms <= slo_tpot_ms))


@dataclass(frozen=True)
class Comparison:
    summary: pl.DataFrame  # per policy; with a ``rank`` when the calibration is to scale
    outcomes: pl.DataFrame  # per request and policy
    calibration: Calibration | None  # None when the pool is not the recorded one

    @property
    def ranked(self) -> bool:
        return self.calibration is not None and self.calibration.to_scale


def compare(records: pl.DataFrame, policies: Sequence[str] = DEFAULT_POLICIES, servers: int | None = None,
            server_type: str = "h100", seed: int = 0, progress: Callable[[str], None] | None = None,
            predictor: LatencyPredictor | None = None, *, period_s: float = 15.0,
            tolerance: float = 1.5) -> Comparison:
    """Every policy over the recorded arrivals; the recorded outcomes come first as ``recorded``, then the
    recorded assignment replayed (``recorded, simulated``) when the pool is the recorded one.

    ``predicted-latency`` schedules with the router's engine and ``predictor`` (the published models)."""
    picks = [(name, _pick(name, seed, predictor)) for name in policies]  # each used once: they hold state
    requests = requests_from(records)
    recorded_count = max(records.get_column("server_id").n_unique(), 1)
    calibration = None
    outcomes = [_recorded(records)]
    names = ["recorded"]
    if not servers or servers == recorded_count:
        calibration = calibrate(records, requests, server_type, seed=seed, period_s=period_s, tolerance=tolerance)
        pool, actions = calibration.pool, calibration.actions
        outcomes.append(_frame(REPLAYED, calibration.replay.outcomes))
        names.append(REPLAYED)
    else:
        pool, actions = uniform_pool(servers, server_type), []
    for name, pick in picks:
        result = run(requests, pool, pick, seed=seed, telemetry=False, actions=actions)
        outcomes.append(_frame(name, result.outcomes))
        if progress:
            progress(name)
    table = pl.concat(outcomes)
    span = _span(records)
    summary = pl.DataFrame([_summary(name, table.filter(pl.col("policy") == name), len(requests), span)
                            for name in [*names, *policies]])
    if calibration is not None and calibration.to_scale:
        summary = _ranked(summary, policies)
    return Comparison(summary, table, calibration)


def _pick(name: str, seed: int, predictor: LatencyPredictor | None) -> PickFunction:
    """A fresh pick function of policy ``name``."""
    if name == PREDICTED:
        if predictor is None:
            raise ValueError(f"policy {PREDICTED!r} needs published models; none were read from the model topic")
        return engine_pick(predictor, seed=seed)
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(KNOWN_POLICIES)}")
    return policy(name, seed)


def _frame(name: str, outcomes: Sequence[Outcome]) -> pl.DataFrame:
    return pl.DataFrame([_simulated(name, o) for o in outcomes], schema=OUTCOME_SCHEMA, orient="row")


def _ranked(summary: pl.DataFrame, policies: Sequence[str]) -> pl.DataFrame:
    """The simulated policies ranked by SLO attainment, then goodput, then TTFT p99."""
    order = (summary.filter(pl.col("policy").is_in(list(policies)))
             .sort(["slo_attainment", "goodput_rps", "ttft_p99_ms"], descending=[True, True, False], nulls_last=True)
             .get_column("policy").to_list())
    rank = {name: i + 1 for i, name in enumerate(order)}
    return summary.with_columns(pl.col("policy").replace_strict(rank, default=None, return_dtype=pl.Int64)
                                .alias("rank"))


def _simulated(name: str, outcome: Outcome) -> tuple[str, str, float | None, float | None, bool, bool]:
    """An outcome as the recorded ones read: TTFT and TPOT of streaming requests only; a non-streaming
    response arrives whole, so its E2E is what the TTFT SLO is held to."""
    request = outcome.request
    if request.stream:
        ttft, tpot, first = outcome.ttft_ms, outcome.tpot_ms, outcome.ttft_ms
    else:
        ttft, tpot, first = None, None, outcome.e2e_ms
    return (name, request.request_id, ttft, tpot, met(first, tpot, request.slo_ttft_ms, request.slo_tpot_ms),
            request.slo_ttft_ms is not None or request.slo_tpot_ms is not None)


def _recorded(records: pl.DataFrame) -> pl.DataFrame:
    """What happened in service, read as :func:`_simulated` reads a simulated outcome."""
    stream = pl.col("stream")
    ttft, tpot = pl.when(stream).then(pl.col("ttft_ms")), pl.when(stream).then(pl.col("tpot_ms"))
    seen = pl.when(stream).then(pl.col("ttft_ms")).otherwise(pl.col("e2e_ms"))
    return records.select(
        pl.lit("recorded").alias("policy"), "request_id", ttft.alias("ttft_ms"), tpot.alias("tpot_ms"),
        ((pl.col("slo_ttft_ms").is_null() | (seen <= pl.col("slo_ttft_ms")))
         & (pl.col("slo_tpot_ms").is_null() | tpot.is_null() | (tpot <= pl.col("slo_tpot_ms")))).alias("met_slo"),
        (pl.col("slo_ttft_ms").is_not_null() | pl.col("slo_tpot_ms").is_not_null()).alias("has_slo"),
    ).cast(OUTCOME_SCHEMA)


def _span(records: pl.DataFrame) -> float:
    if records.height == 0:
        return math.nan
    last = number(records.get_column("completion_ts").max(), "the last completion_ts")
    return max(last - number(records.get_column("arrival_ts").min(), "the first arrival_ts"), 1e-9)


def _summary(name: str, outcomes: pl.DataFrame, offered: int, span_s: float) -> dict[str, object]:
    ttft = outcomes.get_column("ttft_ms").drop_nulls().to_list()
    tpot = outcomes.get_column("tpot_ms").drop_nulls().to_list()
    with_slo = outcomes.filter(pl.col("has_slo"))
    return {"policy": name, "completed": outcomes.height, "offered": offered,
            "ttft_p50_ms": quantile(ttft, 0.5), "ttft_p99_ms": quantile(ttft, 0.99),
            "tpot_p50_ms": quantile(tpot, 0.5), "tpot_p99_ms": quantile(tpot, 0.99),
            "slo_requests": with_slo.height,
            "slo_attainment": number(with_slo.get_column("met_slo").mean(), "the SLO attainment")
            if with_slo.height else math.nan,
            "goodput_rps": number(outcomes.get_column("met_slo").sum(), "the requests within SLO") / span_s}
