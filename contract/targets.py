"""The latency targets the models learn, and what each one means in a telemetry record.

Each target is observed in one record field (:data:`OBSERVED`) and its prediction travels in another
(:data:`PREDICTED`). Streaming records train TTFT and TPOT, non-streaming ones E2E (:func:`trains`). A
client waits for its response to start: the first token of a stream, the whole response otherwise
(:func:`response_ms`).

>>> trains("tpot", stream=True), trains("e2e", stream=True)
(True, False)
>>> response_ms(False, 80.0, None), response_ms(False, 80.0, 900.0), response_ms(True, 80.0, 900.0)
(80.0, 900.0, 80.0)

Over many servers at once, one target for all: a server whose pool has no E2E model yet is compared with the
others by TTFT, every one of them, never its TTFT with their E2E.

>>> response_ms(False, np.array([80.0, 90.0]), np.array([900.0, np.nan])).tolist()
[80.0, 90.0]
"""

from __future__ import annotations

import math
from typing import Any, TypeVar, overload

import numpy as np

TARGETS = ("ttft", "tpot", "e2e")
OBSERVED = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}  # target -> telemetry field it is observed in
PREDICTED = {"ttft": "predicted_ttft_ms", "tpot": "predicted_tpot_ms", "e2e": "predicted_e2e_ms"}
_TRAINED_BY_STREAMS = {"ttft": True, "tpot": True, "e2e": False}

Stream = TypeVar("Stream")


def trains(target: str, stream: Stream) -> Stream:
    """Whether records with ``stream`` train ``target``: for a bool, or element-wise for a numpy array or a
    polars expression."""
    return stream == _TRAINED_BY_STREAMS[target]  # type: ignore[return-value]


def target_value(record: Any, target: str) -> float | None:
    """The observed value of ``target`` a telemetry record trains, or None when it trains no such model."""
    if target not in OBSERVED:
        raise ValueError(f"unknown target {target!r}; expected one of {TARGETS}")
    return getattr(record, OBSERVED[target]) if trains(target, record.stream) else None


def predicted_value(record: Any, target: str) -> float | None:
    """The prediction of ``target`` that was used when the request was routed, if any."""
    value: float | None = getattr(record, PREDICTED[target])
    return value


@overload
def response_ms(stream: bool, ttft_ms: np.ndarray, e2e_ms: np.ndarray) -> np.ndarray: ...


@overload
def response_ms(stream: bool, ttft_ms: float | None, e2e_ms: float | None) -> float: ...


def response_ms(stream: bool, ttft_ms: Any, e2e_ms: Any) -> Any:
    """When the response starts, in ms: TTFT for a stream, E2E otherwise; where that one is unknown (None or
    NaN) the other stands in. Scalars, or arrays of servers to compare: a stand-in is not comparable with what it
    stands in for (a TTFT looks many times faster than an E2E), so where any server has only the other, every
    server is compared by the other."""
    first, other = (ttft_ms, e2e_ms) if stream else (e2e_ms, ttft_ms)
    if isinstance(first, np.ndarray):
        if (np.isnan(first) & ~np.isnan(other)).any():
            first, other = other, first
        return np.where(np.isnan(first), other, first)
    return other if first is None or math.isnan(first) else first
