"""What the router saw of a server at dispatch: the raw server state the latency models read.

:class:`ServerState` declares each field once, with a :class:`RawField`: its kind (as the telemetry
validator reads it), what it measures, and the range the predictor's probe rows span. The rest is derived
from it by field iteration: the telemetry record's server fields, the raw feature columns, the router's
server snapshot and its column table, the Pick API's candidate message (its fields carry the same names),
the record the router and the simulator build at completion, and the probe rows.

Adding a raw server feature: a field here, where the router measures it (:mod:`router.state.pool`), where
the simulator measures it (:meth:`sim.view.PoolView.server_state`), and the field of ``ServerState`` in
``router/proto/router.proto``. A feature scraped from the server's ``/metrics`` is declared with its series in
:mod:`contract.server_metrics`, which the router's pool and the simulator's view read it by.

A field read by the models of some targets only names them (``targets``); the others train with it held at
zero (:func:`contract.features.training_features`), so their trees never split on it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

ENCODER_TARGETS = ("ttft", "e2e")  # multimodal encoding is prefill work: read by the models of these targets
NO_TOKEN_AGE_MS = 10_000.0  # last_token_age_ms when the router saw no token from the server (or none this recent)

# Plausible upper bounds, the same for the telemetry validator and for every API that produces telemetry or
# takes these values in (the Pick API's candidates and reports, the scheduling headers): beyond them a value
# is a mistake or an attack, never a measurement.
MAX_COUNT = 1_000_000_000  # tokens or requests: more than any prompt, output, queue or server ever holds
MAX_LATENCY_MS = 3_600_000.0  # an hour: longer than any request, token, SLO or prediction
KIND_RANGES: dict[str, tuple[float, float]] = {"count": (0, MAX_COUNT), "fraction": (0.0, 1.0),
                                               "latency": (0.0, MAX_LATENCY_MS)}


@dataclass(frozen=True, slots=True)
class RawField:
    """What a raw feature is: its kind (``count``, ``fraction`` or ``latency``; the values each allows are
    :data:`KIND_RANGES`), what it measures, the range ``(low, high)`` the probe rows span (counts: integers
    from low to below high), when readings above some value all mean the same, that ``cap``, and the targets
    whose models read it (None: every target)."""

    kind: str
    doc: str
    probe: tuple[float, float]
    cap: float | None = None
    targets: tuple[str, ...] | None = None

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` values drawn uniformly over the probe range (integers for a count)."""
        low, high = self.probe
        return rng.integers(int(low), int(high), n) if self.kind == "count" else rng.uniform(low, high, n)


def raw(kind: str, doc: str, probe: tuple[float, float], *, default: Any = dataclasses.MISSING,
        cap: float | None = None, targets: tuple[str, ...] | None = None) -> Any:
    """A :class:`ServerState` field and its :class:`RawField`."""
    return dataclasses.field(default=default, metadata={"raw": RawField(kind, doc, probe, cap, targets)})


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerState:
    """One server's raw state as the router saw it when it dispatched a request there."""

    kv_cache_usage: float = raw("fraction", "KV-cache usage, as last scraped", (0.0, 1.0))
    num_waiting: int = raw("count", "requests waiting on the server, as last scraped", (0, 64))
    num_running: int = raw("count", "requests running on the server, as last scraped", (0, 256))
    prefix_match: float = raw("fraction", "fraction of this request's prompt cached on the server", (0.0, 1.0))
    inflight_requests: int = raw("count", "requests the router dispatched there that have not finished", (0, 320))
    inflight_prompt_tokens: int = raw("count", "prompt tokens of those requests", (0, 1_000_000))
    inflight_prefill_tokens: int = raw(
        "count", "prompt tokens of the streaming ones whose first token has not arrived: prefill queued ahead",
        (0, 1_000_000), default=0)
    last_token_age_ms: float = raw(
        "latency", "ms since the server last streamed a token through the router", (0.0, NO_TOKEN_AGE_MS),
        default=NO_TOKEN_AGE_MS, cap=NO_TOKEN_AGE_MS)
    token_interval_ms: float = raw(
        "latency", "ms between its last two batch steps that streamed a token (0: unknown)", (0.0, 1_000.0),
        default=0.0)
    inflight_decode_tokens: int = raw(
        "count", "output-token caps (max_tokens) of the requests the router dispatched there that have not "
                 "finished (0 for one without a cap)", (0, 1_000_000), default=0)
    encoder_matched_size: int = raw(
        "count", "of this request's multimodal encoder input (encoder_input_size), how much the server likely "
                 "holds in its encoder cache", (0, 64), default=0, targets=ENCODER_TARGETS)


SERVER_FIELDS: dict[str, RawField] = {f.name: f.metadata["raw"] for f in dataclasses.fields(ServerState)}


def state_values(source: object) -> dict[str, Any]:
    """The :class:`ServerState` fields of ``source`` (any object that has them), by name."""
    return {name: getattr(source, name) for name in SERVER_FIELDS}


def encoder_excess(matched: Any, input_size: Any) -> dict[int, str]:
    """The rows in which a server is said to hold more of a request's multimodal encoder input
    (``encoder_matched_size``) than the request has (``encoder_input_size``), each with the error that says so:
    numbers are one row, columns (of equal length, or one value for every row) one row per value.

    >>> encoder_excess(2, 3), encoder_excess([1, 4], 3)
    ({}, {1: 'encoder_matched_size 4 exceeds encoder_input_size 3'})
    """
    if isinstance(matched, int | float) and isinstance(input_size, int | float):  # one record: no arrays
        return {} if matched <= input_size else {0: _excess(matched, input_size)}
    matched, input_size = np.broadcast_arrays(np.ravel(np.asarray(matched, dtype=np.float64)),
                                              np.ravel(np.asarray(input_size, dtype=np.float64)))
    return {int(row): _excess(matched[row], input_size[row]) for row in np.flatnonzero(matched > input_size)}


def _excess(matched: float, input_size: float) -> str:
    return f"encoder_matched_size {matched:.10g} exceeds encoder_input_size {input_size:.10g}"
