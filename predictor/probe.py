"""The probe rows every new model version must predict finite, non-negative values for.

They span idle to saturated servers and short to long prompts, computed with the contract's
:func:`~contract.features.feature_matrix` so they are exactly what serving will feed the model.
"""

from __future__ import annotations

import numpy as np

from headroom.contract.features import feature_matrix

_SEED = 20260101
_ROWS = 64


def probe_rows() -> np.ndarray:
    """A fixed ``(64, n_features)`` float32 matrix of plausible and extreme candidate states."""
    rng = np.random.default_rng(_SEED)
    columns = {
        "kv_cache_usage": rng.uniform(0.0, 1.0, _ROWS),
        "num_waiting": rng.integers(0, 64, _ROWS),
        "num_running": rng.integers(0, 256, _ROWS),
        "prompt_tokens": rng.integers(1, 32_768, _ROWS),
        "prefix_match": rng.uniform(0.0, 1.0, _ROWS),
        "inflight_requests": rng.integers(0, 320, _ROWS),
        "inflight_prompt_tokens": rng.integers(0, 1_000_000, _ROWS),
        "max_tokens": rng.integers(1, 8_192, _ROWS),
        "inflight_prefill_tokens": rng.integers(0, 1_000_000, _ROWS),
        "last_token_age_ms": rng.uniform(0.0, 10_000.0, _ROWS),
        "token_interval_ms": rng.uniform(0.0, 1_000.0, _ROWS),
    }
    for name, values in columns.items():  # row 0: an idle server, smallest request; row 1: saturated
        values[0] = 1 if name in ("prompt_tokens", "max_tokens") else 0
        values[1] = values.max()
    return feature_matrix(columns)


PROBE_ROWS = probe_rows()
