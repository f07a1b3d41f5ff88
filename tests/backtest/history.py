"""Telemetry history made by the simulator: a pool that slows down half-way, routed with fixed predictions."""

from __future__ import annotations

import polars as pl

from headroom.contract.settings import from_env
from headroom.contract.telemetry import TelemetryRecord, encode
from headroom.contract.telemetry_frame import records_frame
from headroom.sim.policies import policy
from headroom.sim.pool import run, slow_down, uniform_pool
from headroom.sim.synthetic import generate, poisson_arrivals
from headroom.sim.view import Pick
from headroom.streams.settings import PipelineSettings

VERSIONS = {"ttft": 3, "tpot": 3, "e2e": 2}


def simulated_records(seconds: float = 80.0, rate: float = 40.0, seed: int = 1) -> list[TelemetryRecord]:
    requests = generate(poisson_arrivals(rate, seconds, seed=seed), stream_fraction=0.8, seed=seed,
                        slo_ttft_ms=300.0, slo_tpot_ms=40.0)
    least_queue = policy("least-queue")

    def pick(request, view) -> Pick:
        return Pick(least_queue(request, view), predicted_ttft_ms=40.0, predicted_tpot_ms=12.0,
                    predicted_e2e_ms=1500.0, model_versions=VERSIONS)

    return run(requests, uniform_pool(4), pick, seed=seed,
               actions=[(seconds / 2, slow_down("server-0", 3.0)), (seconds / 2, slow_down("server-1", 3.0))]).records


def frame_of(records: list[TelemetryRecord]) -> pl.DataFrame:
    """A replay frame of ``records`` as if read from offsets 0.. of one partition."""
    frame, rejected = records_frame([encode(r) for r in records])
    assert not rejected
    return frame.with_columns(pl.lit(0, pl.Int32).alias("partition"),
                              pl.int_range(0, frame.height, dtype=pl.Int64).alias("offset"),
                              (pl.col("completion_ts") * 1000).cast(pl.Int64).alias("kafka_ts_ms"))


def quick_settings() -> PipelineSettings:
    return from_env(PipelineSettings, {}, trees=10, retrain_interval_s=10.0, min_samples=100)
