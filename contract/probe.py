"""The probe rows every new model version must predict finite, non-negative values for, and its trainer's
outputs on them.

The rows span idle to saturated servers and short to long prompts — each raw feature over the probe range the
contract declares for it (:data:`contract.features.RAW_FIELDS`) — computed with the contract's
:func:`~contract.features.feature_matrix` so they are exactly what serving will feed the model.

The trainer stores XGBoost's own raw outputs on these rows in the model (:func:`stamp`, booster attribute
:data:`PROBE_ATTRIBUTE`), inside the bytes the message signs: a reader that walks the trees without XGBoost
checks that its outputs equal them (:func:`stamped`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from headroom.contract.features import RAW_FIELDS, feature_matrix

if TYPE_CHECKING:
    import xgboost

PROBE_ATTRIBUTE = "headroom_probe"  # booster attribute: its raw outputs on PROBE_ROWS, a JSON list

_SEED = 20260101
_ROWS = 64


def probe_rows() -> np.ndarray:
    """A fixed ``(64, n_features)`` float32 matrix of plausible and extreme candidate states."""
    rng = np.random.default_rng(_SEED)
    columns = {}
    for name, field in RAW_FIELDS.items():
        values = field.draw(rng, _ROWS)
        values[0] = field.probe[0]  # row 0: an idle server, smallest request; row 1: saturated
        values[1] = values.max()
        columns[name] = values
    return feature_matrix(columns)


PROBE_ROWS = probe_rows()


def stamp(booster: xgboost.Booster) -> None:
    """Store ``booster``'s raw outputs on :data:`PROBE_ROWS` in it (attribute :data:`PROBE_ATTRIBUTE`)."""
    outputs = np.asarray(booster.inplace_predict(PROBE_ROWS), dtype=np.float32)
    booster.set_attr(**{PROBE_ATTRIBUTE: json.dumps([float(v) for v in outputs])})


def stamped(attributes: Mapping[str, str]) -> np.ndarray | None:
    """The raw outputs :func:`stamp` stored in a model with these attributes (float32, one per probe row), None
    when it stored none; raises ValueError for any other value."""
    text = attributes.get(PROBE_ATTRIBUTE)
    if text is None:
        return None
    try:
        values = json.loads(text)
    except ValueError as err:
        raise ValueError(f"the model's {PROBE_ATTRIBUTE!r} is not JSON: {err}") from err
    if not (isinstance(values, list) and len(values) == len(PROBE_ROWS)
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)):
        raise ValueError(f"the model's {PROBE_ATTRIBUTE!r} must be a list of {len(PROBE_ROWS)} numbers")
    outputs = np.array(values, dtype=np.float32)
    if not np.isfinite(outputs).all():
        raise ValueError(f"the model's {PROBE_ATTRIBUTE!r} holds values that are not finite numbers")
    return outputs
