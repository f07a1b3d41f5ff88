"""A valid telemetry record to start test cases from."""

import time

from headroom.contract.telemetry import TelemetryRecord


def valid_record(**changes) -> TelemetryRecord:
    fields = dict(request_id="req-1", server_id="server-0", pool_key="h100/llama3-8b", stream=True,
                  arrival_ts=1_700_000_000.0, dispatch_ts=1_700_000_000.001, completion_ts=1_700_000_002.0,
                  prompt_tokens=1024, output_tokens=128, kv_cache_usage=0.42, num_waiting=2, num_running=17,
                  prefix_match=0.5, inflight_requests=3, inflight_prompt_tokens=4096, e2e_ms=1999.0,
                  max_tokens=256, ttft_ms=120.0, tpot_ms=14.8, predicted_ttft_ms=110.0, predicted_tpot_ms=15.0,
                  model_versions={"ttft": 3, "tpot": 4}, slo_ttft_ms=500.0, slo_tpot_ms=50.0, priority=0)
    fields.update(changes)
    return TelemetryRecord(**fields)


def recent_record(**changes) -> TelemetryRecord:
    """:func:`valid_record`, completed just now (a live worker dead-letters records far from its clock)."""
    now = time.time()
    return valid_record(**{"arrival_ts": now - 2.0, "dispatch_ts": now - 1.999, "completion_ts": now, **changes})
