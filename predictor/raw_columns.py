"""Raw values by column, as callers of the prediction APIs send them, into feature rows.

A caller names each column as :data:`contract.features.RAW_COLUMNS` does and gives one value per row, or
one value for every row (a request's own fields); a column it leaves out takes the contract's default
(:data:`contract.features.RAW_DEFAULTS`) or, without one, is an error. Values must be finite and within
their kind's range (a count or latency not negative, a fraction within [0, 1]), and a server cannot hold
more of a request's encoder input than it has (:func:`contract.server_state.encoder_excess`); a value above
a field's cap means the cap. The derived features are computed here, by :func:`contract.features.feature_matrix`:
a client never computes one.

>>> from headroom.contract.features import FEATURE_NAMES
>>> rows = raw_rows({"prompt_tokens": [512], "prefix_match": [0.25, 0.5], "kv_cache_usage": [0.1, 0.9],
...                  "num_waiting": [0, 3], "num_running": [4, 8], "inflight_requests": [0, 0],
...                  "inflight_prompt_tokens": [0, 0]})
>>> rows.shape[0], rows[:, FEATURE_NAMES.index("effective_prompt_tokens")].tolist()
(2, [384.0, 256.0])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from headroom.contract.features import RAW_COLUMNS, RAW_DEFAULTS, RAW_FIELDS, feature_matrix
from headroom.contract.server_state import KIND_RANGES, encoder_excess
from headroom.predictor.errors import InvalidBatch


def raw_rows(columns: Mapping[str, Sequence[float] | np.ndarray]) -> np.ndarray:
    """Feature rows from raw columns; :class:`~predictor.errors.InvalidBatch` names what is wrong."""
    unknown = sorted(set(columns) - set(RAW_COLUMNS))
    if unknown:
        raise InvalidBatch(f"unknown raw column {unknown[0]!r}; the raw columns are {', '.join(RAW_COLUMNS)}")
    missing = [name for name in RAW_COLUMNS if name not in columns and name not in RAW_DEFAULTS]
    if missing:
        raise InvalidBatch(f"raw column {missing[0]!r} is missing and has no default")
    values = {name: np.asarray(column, dtype=np.float64) for name, column in columns.items()}
    lengths = {len(v) for v in values.values() if v.ndim == 1} - {1}
    if any(v.ndim != 1 for v in values.values()) or len(lengths) > 1:
        raise InvalidBatch(f"raw columns hold different numbers of rows: {sorted(lengths)} (a column holds one "
                           f"value per row, or one for every row)")
    n = lengths.pop() if lengths else 1
    if not all(len(v) for v in values.values()):
        raise InvalidBatch("empty batch: a raw column holds no value")
    full = {}
    for name in RAW_COLUMNS:
        column = values.get(name)
        full[name] = np.full(n, RAW_DEFAULTS[name], dtype=np.float64) if column is None else _checked(name, column, n)
    for row, error in encoder_excess(full["encoder_matched_size"], full["encoder_input_size"]).items():
        raise InvalidBatch(f"{error} in row {row}")
    return feature_matrix(full)


def _checked(name: str, column: np.ndarray, n: int) -> np.ndarray:
    field = RAW_FIELDS[name]
    low, high = KIND_RANGES[field.kind]
    bad = ~(np.isfinite(column) & (column >= low) & (column <= high))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InvalidBatch(f"raw column {name!r} is a {field.kind} and must be finite and within [{low:g}, {high:g}], "
                           f"got {column[row]} in row {row}")
    if field.cap is not None:
        column = np.minimum(column, field.cap)
    return np.broadcast_to(column, (n,))
