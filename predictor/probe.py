"""The probe rows every new model version must predict finite, non-negative values for.

They span idle to saturated servers and short to long prompts — each raw feature over the probe range the
contract declares for it (:data:`contract.features.RAW_FIELDS`) — computed with the contract's
:func:`~contract.features.feature_matrix` so they are exactly what serving will feed the model.
"""

from __future__ import annotations

import numpy as np

from headroom.contract.features import RAW_FIELDS, feature_matrix

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
