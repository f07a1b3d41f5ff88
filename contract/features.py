"""The model features, in order, and the one function that computes them.

Training (from telemetry records) and prediction (from candidate servers at scheduling time) both call
:func:`feature_matrix`, so the two can never disagree. Its input is columns of raw values named as in
:class:`~contract.telemetry.TelemetryRecord`; derived features are computed here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from headroom.contract.telemetry import TelemetryRecord

# Raw inputs, as named in the telemetry record.
RAW_COLUMNS = ("kv_cache_usage", "num_waiting", "num_running", "prompt_tokens", "prefix_match",
               "inflight_requests", "inflight_prompt_tokens", "max_tokens", "inflight_prefill_tokens",
               "last_token_age_ms", "token_interval_ms")

# Model features, in the order of the columns of a feature matrix.
FEATURE_NAMES = RAW_COLUMNS + ("effective_prompt_tokens", "is_queued")
FEATURE_SCHEMA = "v2:" + ",".join(FEATURE_NAMES)


def feature_matrix(columns: Mapping[str, Sequence[float] | np.ndarray]) -> np.ndarray:
    """An ``(n, len(FEATURE_NAMES))`` float32 matrix from raw columns of equal length."""
    raw = [np.asarray(columns[name], dtype=np.float32) for name in RAW_COLUMNS]
    _, waiting, _, prompt, prefix, *_ = raw
    effective = prompt * (1.0 - prefix)
    queued = (waiting > 0).astype(np.float32)
    return np.column_stack(raw + [effective, queued]).astype(np.float32, copy=False)


def records_matrix(records: Iterable[TelemetryRecord]) -> np.ndarray:
    """The feature matrix of telemetry records, one row each."""
    records = list(records)
    return feature_matrix({name: [getattr(r, name) for r in records] for name in RAW_COLUMNS})

