"""llm-d's latency predictor in headroom's terms: its prediction rows, and its training samples as telemetry.

llm-d's endpoint picker sends its latency predictor rows of named fields; each maps to one of headroom's
raw columns (:data:`RAW_COLUMN_OF`)::

    llm-d field                headroom raw column
    kv_cache_percentage        kv_cache_usage
    input_token_length         prompt_tokens
    num_request_waiting        num_waiting
    num_request_running        num_running
    prefix_cache_score         prefix_match
    prefill_tokens_in_flight   inflight_prefill_tokens
    decode_tokens_in_flight    inflight_decode_tokens
    encoder_input_size         encoder_input_size
    encoder_matched_size       encoder_matched_size

The raw columns llm-d does not send take the contract's default (:data:`contract.features.RAW_DEFAULTS`);
``inflight_requests`` and ``inflight_prompt_tokens``, which have none, are 0 — in training samples and
prediction rows alike, so the models of such a pool learn nothing from them. ``num_tokens_generated`` is
no model input here (headroom's TPOT is a request's mean over all its tokens, predicted before the first);
in a training sample it says how many tokens the TPOT was measured over.

``pod_type`` says a server's role in prefill/decode disaggregation, and the role is part of the pool key
(:func:`pool_key_of`): prefill and decode servers run different work, so each role gets its own windows,
drift detectors, promotion gate, models and telemetry partition. llm-d's servers take any string there (the
endpoint picker sends the value of a pod's role label; the reference's load tool sends ``"monolithic"``):
``"prefill"`` and ``"decode"`` are those roles, and every other value, null and ``""`` included, is a
monolithic server (:func:`role_of`).

A training sample becomes one telemetry record (:func:`sample_record`). It names no request, server,
stream flag or time, so:

- ``request_id`` is given by the receiver, unique per sample (``llm-d-<call id>-<index in the call>``);
  ``server_id`` is ``llm-d`` (a sample does not say which pod served it); ``pool_key`` is
  :func:`pool_key_of` the receiver's pool key and the role of the sample's ``pod_type``;
- ``stream`` is true: a sample observes a first token (``actual_ttft_ms`` > 0) and/or the time per output
  token (``actual_tpot_ms`` > 0), which only streams show, and its record trains exactly the models of the
  latencies it observed. A latency of 0 means "not observed" (llm-d's TTFT samples carry ``actual_tpot_ms``
  0, its TPOT samples ``actual_ttft_ms`` 0); a sample observing neither is invalid;
- ``output_tokens`` is 1 for a TTFT-only sample, otherwise ``num_tokens_generated`` but at least 2 (a
  TPOT spans two tokens or more); ``e2e_ms`` is what the sample spans: ``ttft`` + ``tpot`` ×
  (``output_tokens`` − 1), either term 0 when not observed;
- ``completion_ts`` is the sample's ``timestamp`` (unix seconds), or the receiver's clock when the call
  arrived if it has none or one not after the unix epoch (Go's zero time); ``dispatch_ts`` =
  ``arrival_ts`` = ``completion_ts`` − ``e2e_ms`` (not before the epoch);
- ``max_tokens`` is 0 (unknown); no prediction, model versions, SLOs or priority.

The record then passes the one validator (:func:`contract.telemetry.validate`) like any other.

>>> record = sample_record({"kv_cache_percentage": 0.5, "input_token_length": 800, "num_request_waiting": 2,
...     "num_request_running": 4, "num_tokens_generated": 0, "prefix_cache_score": 0.25, "actual_ttft_ms": 120.0,
...     "actual_tpot_ms": 0.0, "pod_type": "prefill"}, pool_key="llama", request_id="llm-d-x-0", received_at=1e9)
>>> record.pool_key, record.stream, record.ttft_ms, record.tpot_ms, record.output_tokens, record.dispatch_ts
('llama-prefill', True, 120.0, None, 1, 999999999.88)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from headroom.contract.features import RAW_COLUMNS, RAW_DEFAULTS
from headroom.contract.telemetry import SCHEMA_VERSION, InvalidRecord, TelemetryRecord, validate

ROLES = ("", "prefill", "decode")  # a monolithic server, and the two roles of disaggregated serving
SAMPLE_SERVER_ID = "llm-d"
RAW_COLUMN_OF = {
    "kv_cache_percentage": "kv_cache_usage",
    "input_token_length": "prompt_tokens",
    "num_request_waiting": "num_waiting",
    "num_request_running": "num_running",
    "prefix_cache_score": "prefix_match",
    "prefill_tokens_in_flight": "inflight_prefill_tokens",
    "decode_tokens_in_flight": "inflight_decode_tokens",
    "encoder_input_size": "encoder_input_size",
    "encoder_matched_size": "encoder_matched_size",
}
UNMEASURED = {name: RAW_DEFAULTS.get(name, 0) for name in RAW_COLUMNS if name not in RAW_COLUMN_OF.values()}


def role_of(pod_type: str | None) -> str:
    """The role of a ``pod_type``: ``"prefill"`` or ``"decode"``, else ``""`` (a monolithic server).

    >>> [role_of(value) for value in ("prefill", "decode", "", None, "monolithic", "both")]
    ['prefill', 'decode', '', '', '', '']
    """
    return pod_type if pod_type in ROLES else ""


def pool_key_of(pool_key: str, role: str) -> str:
    """The pool key of a role (:data:`ROLES`): the pool's own for ``""`` (a monolithic server),
    ``<pool>-<role>`` else."""
    if role not in ROLES:
        raise ValueError(f"a role is one of {ROLES}, got {role!r}")
    return f"{pool_key}-{role}" if role else pool_key


def raw_values(fields: Mapping[str, Any]) -> dict[str, Any]:
    """headroom's raw columns (or values) from llm-d's fields (or columns of them), unmeasured ones filled."""
    return {**UNMEASURED, **{RAW_COLUMN_OF[name]: value for name, value in fields.items() if name in RAW_COLUMN_OF}}


def sample_record(sample: Mapping[str, Any], *, pool_key: str, request_id: str, received_at: float,
                  timestamp: float | None = None) -> TelemetryRecord:
    """The telemetry record of one training sample (llm-d's field names, validated by the receiver's schema);
    ``timestamp`` is the sample's own, in unix seconds. Raises :class:`~contract.telemetry.InvalidRecord`."""
    ttft, tpot = float(sample["actual_ttft_ms"]), float(sample["actual_tpot_ms"])
    if ttft <= 0 and tpot <= 0:
        raise InvalidRecord("the sample observes neither TTFT nor TPOT (actual_ttft_ms and actual_tpot_ms are 0)")
    output_tokens = max(2, int(sample.get("num_tokens_generated", 0))) if tpot > 0 else 1
    e2e_ms = ttft + tpot * (output_tokens - 1)
    completion = timestamp if timestamp is not None and timestamp > 0 else received_at
    start = max(0.0, completion - e2e_ms / 1000.0)
    role_pool = pool_key_of(pool_key, role_of(sample.get("pod_type")))
    body = {"v": SCHEMA_VERSION, **raw_values(sample), "request_id": request_id, "server_id": SAMPLE_SERVER_ID,
            "pool_key": role_pool, "stream": True, "arrival_ts": start, "dispatch_ts": start,
            "completion_ts": completion, "output_tokens": output_tokens, "e2e_ms": e2e_ms,
            "ttft_ms": ttft if ttft > 0 else None, "tpot_ms": tpot if tpot > 0 else None}
    return validate({name: value for name, value in body.items() if value is not None})
