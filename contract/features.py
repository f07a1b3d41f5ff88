"""The model features, in order, and the one function that computes them.

Training (from telemetry records) and prediction (from candidate servers at scheduling time) both call
:func:`feature_matrix`, so the two can never disagree. Its input is columns of raw values named as in
:class:`~contract.telemetry.TelemetryRecord`: the server's state (:class:`~contract.server_state.ServerState`)
and the request's own raw features (:data:`REQUEST_FIELDS`); derived features are computed here. Clients
of every prediction API send raw values only.

A raw field that names the targets reading it (:attr:`~contract.server_state.RawField.targets`) is held at
zero in the training rows of every other target (:func:`training_features`): their trees never split on it,
so what it says at serving time cannot move their predictions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from headroom.contract.server_state import ENCODER_TARGETS, SERVER_FIELDS, RawField
from headroom.contract.telemetry import FIELD_DEFAULTS, TelemetryRecord

# The request's raw features, as named in the telemetry record.
REQUEST_FIELDS = {
    "prompt_tokens": RawField("count", "prompt tokens of the request", (1, 32_768)),
    "max_tokens": RawField("count", "the request's output cap; 0 when unknown", (1, 8_192)),
    "encoder_input_size": RawField("count", "the request's multimodal encoder input (media items; 0: text only)",
                                   (0, 64), targets=ENCODER_TARGETS),
}
_V2_REQUEST_COLUMNS = {"prompt_tokens": 3, "max_tokens": 7}  # where schema v2 put them among the server's fields


def _raw_columns() -> tuple[str, ...]:
    """The server's fields in their order, the request's where schema v2 put them; later ones go last."""
    columns = list(SERVER_FIELDS)
    for name, column in sorted(_V2_REQUEST_COLUMNS.items(), key=lambda item: item[1]):
        columns.insert(column, name)
    return tuple(columns) + tuple(name for name in REQUEST_FIELDS if name not in _V2_REQUEST_COLUMNS)


# Raw inputs, in the order of the first columns of a feature matrix, and what each one is.
RAW_COLUMNS = _raw_columns()
RAW_FIELDS: dict[str, RawField] = {name: {**SERVER_FIELDS, **REQUEST_FIELDS}[name] for name in RAW_COLUMNS}
RAW_DEFAULTS = {name: FIELD_DEFAULTS[name] for name in RAW_COLUMNS if name in FIELD_DEFAULTS}  # what "unset" means

# Model features, in the order of the columns of a feature matrix.
FEATURE_NAMES = RAW_COLUMNS + ("effective_prompt_tokens", "is_queued")
FEATURE_SCHEMA = "v3:" + ",".join(FEATURE_NAMES)


_PROMPT, _PREFIX, _WAITING = (RAW_COLUMNS.index(name) for name in ("prompt_tokens", "prefix_match", "num_waiting"))


def feature_matrix(columns: Mapping[str, Sequence[float] | np.ndarray | float], rows: int | None = None) -> np.ndarray:
    """An ``(n, len(FEATURE_NAMES))`` float32 matrix from raw columns of equal length ``n``; with ``rows`` (n),
    a column may also be one number, that of every row. Filled in place: no intermediate column is copied."""
    n = len(columns[RAW_COLUMNS[0]]) if rows is None else rows  # type: ignore[arg-type]
    matrix = np.empty((n, len(FEATURE_NAMES)), dtype=np.float32)
    for j, name in enumerate(RAW_COLUMNS):
        values = columns[name]
        if (values.ndim if type(values) is np.ndarray else np.ndim(values)) and len(values) != n:  # type: ignore[arg-type]
            raise ValueError(f"raw column {name!r} holds {len(values)} values, not {n}")  # type: ignore[arg-type]
        matrix[:, j] = values
    matrix[:, -2] = matrix[:, _PROMPT] * (1.0 - matrix[:, _PREFIX])  # effective_prompt_tokens, in float32
    matrix[:, -1] = matrix[:, _WAITING] > 0  # is_queued
    return matrix


def unread_columns(target: str) -> tuple[int, ...]:
    """Columns of a feature matrix that the models of ``target`` do not read."""
    return tuple(i for i, field in enumerate(RAW_FIELDS.values())
                 if field.targets is not None and target not in field.targets)


def training_features(features: np.ndarray, target: str | None) -> np.ndarray:
    """A feature matrix as the models of ``target`` train on it: the columns they do not read held at zero
    (None: every column as it is)."""
    unread = unread_columns(target) if target is not None else ()
    if not unread:
        return features
    held = features.copy()
    held[:, list(unread)] = 0.0
    return held


def records_matrix(records: Iterable[TelemetryRecord]) -> np.ndarray:
    """The feature matrix of telemetry records, one row each."""
    records = list(records)
    return feature_matrix({name: [getattr(r, name) for r in records] for name in RAW_COLUMNS})
