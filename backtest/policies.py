"""Policy comparison: the recorded arrivals replayed through the offline simulator under several policies.

Each telemetry record becomes a :class:`sim.request.SimRequest` with its arrival time (relative to the first),
prompt and output tokens, output cap, stream flag, SLOs and priority. Records carry no prompt prefix
hashes, so replayed requests share no cached prefixes: prefix-aware effects are not reproduced. The pool
is ``servers`` uniform simulated servers (by default as many as the records name).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import polars as pl

from headroom.backtest.router_policy import engine_pick
from headroom.router.roles import LatencyPredictor
from headroom.sim.policies import POLICIES, policy
from headroom.sim.pool import run, uniform_pool
from headroom.sim.request import SimRequest
from headroom.sim.results import quantile

PREDICTED = "predicted-latency"  # the router's own pipeline, with the latest published models
KNOWN_POLICIES = (*POLICIES, PREDICTED)
DEFAULT_POLICIES = ("round-robin", "least-queue", "composite", PREDICTED)
OUTCOME_SCHEMA = {"policy": pl.String, "request_id": pl.String, "ttft_ms": pl.Float64, "tpot_ms": pl.Float64,
                  "met_slo": pl.Boolean, "has_slo": pl.Boolean}


def requests_from(records: pl.DataFrame) -> list[SimRequest]:
    """The recorded arrivals as simulator requests, in arrival order."""
    ordered = records.sort("arrival_ts")
    start = ordered.get_column("arrival_ts").min() if ordered.height else 0.0
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


def compare(records: pl.DataFrame, policies: Sequence[str] = DEFAULT_POLICIES, servers: int | None = None,
            server_type: str = "h100", seed: int = 0, progress: Callable[[str], None] | None = None,
            predictor: LatencyPredictor | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(summary per policy, outcome per request and policy); the recorded outcomes come first as ``recorded``.

    ``predicted-latency`` schedules with the router's engine and ``predictor`` (the published models)."""
    if PREDICTED in policies and predictor is None:
        raise ValueError(f"policy {PREDICTED!r} needs published models; none were read from the model topic")
    requests = requests_from(records)
    count = servers or max(records.get_column("server_id").n_unique(), 1)
    outcomes = [_recorded(records)]
    for name in policies:
        pick = engine_pick(predictor, seed=seed) if name == PREDICTED else policy(name, seed)
        result = run(requests, uniform_pool(count, server_type), pick, seed=seed, telemetry=False)
        outcomes.append(pl.DataFrame([_simulated(name, o) for o in result.outcomes], schema=OUTCOME_SCHEMA,
                                     orient="row"))
        if progress:
            progress(name)
    table = pl.concat(outcomes)
    span = _span(records)
    summary = pl.DataFrame([_summary(name, table.filter(pl.col("policy") == name), len(requests), span)
                            for name in ["recorded", *policies]])
    return summary, table


def _simulated(name: str, outcome) -> tuple:
    """An outcome as the recorded ones read: TTFT and TPOT of streaming requests only; a non-streaming
    response arrives whole, so its E2E is what the TTFT SLO is held to."""
    request = outcome.request
    ttft, tpot = (outcome.ttft_ms, outcome.tpot_ms) if request.stream else (None, None)
    return (name, request.request_id, ttft, tpot,
            met(ttft if request.stream else outcome.e2e_ms, tpot, request.slo_ttft_ms, request.slo_tpot_ms),
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
    return max(records.get_column("completion_ts").max() - records.get_column("arrival_ts").min(), 1e-9)


def _summary(name: str, outcomes: pl.DataFrame, offered: int, span_s: float) -> dict[str, object]:
    ttft = outcomes.get_column("ttft_ms").drop_nulls().to_list()
    tpot = outcomes.get_column("tpot_ms").drop_nulls().to_list()
    with_slo = outcomes.filter(pl.col("has_slo"))
    return {"policy": name, "completed": outcomes.height, "offered": offered,
            "ttft_p50_ms": quantile(ttft, 0.5), "ttft_p99_ms": quantile(ttft, 0.99),
            "tpot_p50_ms": quantile(tpot, 0.5), "tpot_p99_ms": quantile(tpot, 0.99),
            "slo_requests": with_slo.height,
            "slo_attainment": with_slo.get_column("met_slo").mean() if with_slo.height else math.nan,
            "goodput_rps": outcomes.get_column("met_slo").sum() / span_s}
