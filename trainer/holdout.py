"""The stratified, time-ordered holdout: the newest rows of every stratum are held out.

Within each stratum, rows are ranked from newest to oldest; a row is held out when its rank, centred
(``(rank + 0.5) / n``), falls below ``fraction``. So every stratum with enough rows contributes its most
recent rows in proportion, and training never sees data newer than what it is judged on in that stratum.
Strata with fewer than ``min_stratum_rows`` rows are pooled into one, so a window spread thinly over
many strata still gets a holdout of its newest rows.

>>> import numpy as np
>>> holdout_mask(np.array(["a"] * 5 + ["b"] * 2, dtype=object), np.arange(7.0), 0.2, min_stratum_rows=1).tolist()
[False, False, False, False, True, False, False]
"""

from __future__ import annotations

import numpy as np

from headroom.trainer.samples import Samples

SPARSE = "\x00sparse"  # the pooled stratum of thinly populated strata


def holdout_mask(strata: np.ndarray, times: np.ndarray, fraction: float, min_stratum_rows: int = 5) -> np.ndarray:
    """A boolean mask of the held-out rows."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"holdout fraction must be within [0, 1), got {fraction}")
    n = len(times)
    mask = np.zeros(n, dtype=bool)
    if n == 0 or fraction == 0.0:
        return mask
    _, keys, counts = np.unique(strata.astype(str), return_inverse=True, return_counts=True)
    sparse = counts[keys] < min_stratum_rows
    if sparse.any():
        _, keys = np.unique(np.where(sparse, SPARSE, strata.astype(str)), return_inverse=True)
    order = np.lexsort((-times, keys))  # by stratum, newest first
    sorted_keys = keys[order]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    sizes = np.diff(np.r_[starts, n])
    rank = np.arange(n) - np.repeat(starts, sizes)
    size = np.repeat(sizes, sizes)
    mask[order] = (rank + 0.5) / size < fraction
    return mask


def split(samples: Samples, fraction: float, min_stratum_rows: int = 5) -> tuple[Samples, Samples]:
    """``(train, holdout)`` of ``samples``."""
    mask = holdout_mask(samples.strata, samples.times, fraction, min_stratum_rows)
    return samples.take(~mask), samples.take(mask)
