"""Synthetic telemetry from an explicit latency function, for tests that need many realistic-looking records.

TTFT grows with non-cached prompt tokens, the waiting queue and KV pressure; TPOT with running requests
and KV pressure; E2E is TTFT plus TPOT per further token. Noise is log-normal (5%). ``slowdown`` scales
every latency (a regime change, e.g. a server running 2× slower).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

from headroom.contract.features import RAW_COLUMNS
from headroom.contract.strata import stratum_key
from headroom.contract.targets import target_value
from headroom.contract.telemetry import TelemetryRecord
from headroom.trainer.samples import Samples

Predictor = Callable[[TelemetryRecord], dict[str, float]]  # record -> {"predicted_ttft_ms": ..., ...}


def true_ttft_ms(*, prompt_tokens: int, prefix_match: float, num_waiting: int, kv_cache_usage: float) -> float:
    return 20.0 + 0.05 * prompt_tokens * (1.0 - prefix_match) + 15.0 * num_waiting + 200.0 * kv_cache_usage


def true_tpot_ms(*, num_running: int, kv_cache_usage: float) -> float:
    return 8.0 + 0.3 * num_running + 10.0 * kv_cache_usage


def synthetic_records(count: int, *, seed: int, pool_key: str = "pool-a", slowdown: float = 1.0,
                      start_ts: float = 1_700_000_000.0, rate_per_s: float = 200.0,
                      stream_fraction: float = 0.8, predictor: Predictor | None = None,
                      id_prefix: str = "req") -> list[TelemetryRecord]:
    rng = random.Random(seed)
    records = []
    for i in range(count):
        t = start_ts + i / rate_per_s
        prompt = rng.randint(100, 4000)
        prefix = rng.random()
        waiting = min(int(rng.expovariate(0.3)), 20)
        running = rng.randint(0, 64)
        kv = rng.random()
        output = rng.randint(2, 400)
        ttft = slowdown * true_ttft_ms(prompt_tokens=prompt, prefix_match=prefix, num_waiting=waiting,
                                       kv_cache_usage=kv) * rng.lognormvariate(0, 0.05)
        tpot = slowdown * true_tpot_ms(num_running=running, kv_cache_usage=kv) * rng.lognormvariate(0, 0.05)
        e2e = ttft + tpot * (output - 1)
        stream = rng.random() < stream_fraction
        record = TelemetryRecord(
            request_id=f"{id_prefix}-{seed}-{i}", server_id=f"server-{i % 4}", pool_key=pool_key, stream=stream,
            arrival_ts=t, dispatch_ts=t, completion_ts=t + e2e / 1000.0, prompt_tokens=prompt,
            output_tokens=output, kv_cache_usage=kv, num_waiting=waiting, num_running=running,
            prefix_match=prefix, inflight_requests=running + waiting, inflight_prompt_tokens=prompt * (1 + waiting),
            e2e_ms=e2e, max_tokens=512, ttft_ms=ttft if stream else None, tpot_ms=tpot if stream else None)
        if predictor is not None:
            record = _with(record, predictor(record))
        records.append(record)
    return records


def _with(record: TelemetryRecord, changes: dict[str, float]) -> TelemetryRecord:
    return replace(record, **changes)


def oracle(slowdown: float = 1.0) -> Predictor:
    """A predictor that knows the latency function (without noise) at a given speed."""
    def predict(record: TelemetryRecord) -> dict[str, float]:
        ttft = slowdown * true_ttft_ms(prompt_tokens=record.prompt_tokens, prefix_match=record.prefix_match,
                                       num_waiting=record.num_waiting, kv_cache_usage=record.kv_cache_usage)
        tpot = slowdown * true_tpot_ms(num_running=record.num_running, kv_cache_usage=record.kv_cache_usage)
        if record.stream:
            return {"predicted_ttft_ms": ttft, "predicted_tpot_ms": tpot}
        return {"predicted_e2e_ms": ttft + tpot * (record.output_tokens - 1)}
    return predict


def samples_of(records: list[TelemetryRecord], target: str) -> Samples:
    """The training samples the records give ``target``, stratified as the streams window does."""
    rows, strata = [], []
    for record in records:
        value = target_value(record, target)
        if value is not None:
            rows.append((record.completion_ts, value, tuple(float(getattr(record, c)) for c in RAW_COLUMNS)))
            strata.append(stratum_key(num_waiting=record.num_waiting, kv_cache_usage=record.kv_cache_usage,
                                      prefix_match=record.prefix_match))
    return Samples.from_rows(rows, strata)
