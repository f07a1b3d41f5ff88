"""A training set: raw feature columns, the observed target, completion times and strata.

Columns are named as in :data:`contract.features.RAW_COLUMNS`; the model features are derived from them
by :func:`contract.features.feature_matrix`, the function prediction uses too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headroom.contract.features import RAW_COLUMNS, feature_matrix


@dataclass(frozen=True, eq=False)
class Samples:
    raw: np.ndarray  # (n, len(RAW_COLUMNS)) float64, columns in RAW_COLUMNS order
    values: np.ndarray  # (n,) observed target, milliseconds
    times: np.ndarray  # (n,) completion times, unix seconds
    strata: np.ndarray  # (n,) stratum keys (str)

    def __post_init__(self) -> None:
        n = len(self.values)
        if self.raw.shape != (n, len(RAW_COLUMNS)) or len(self.times) != n or len(self.strata) != n:
            raise ValueError(f"samples disagree in length: raw {self.raw.shape}, values {n}, "
                             f"times {len(self.times)}, strata {len(self.strata)}")

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[float, float, Sequence[float]]], strata: Sequence[str]) -> Samples:
        """From ``(time, value, raw columns)`` rows and the stratum of each."""
        if not rows:
            return cls.empty()
        times = np.fromiter((r[0] for r in rows), dtype=np.float64, count=len(rows))
        values = np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows))
        raw = np.asarray([r[2] for r in rows], dtype=np.float64)
        return cls(raw=raw, values=values, times=times, strata=np.asarray(strata, dtype=object))

    @classmethod
    def empty(cls) -> Samples:
        return cls(raw=np.zeros((0, len(RAW_COLUMNS))), values=np.zeros(0), times=np.zeros(0),
                   strata=np.zeros(0, dtype=object))

    def take(self, index: np.ndarray) -> Samples:
        return Samples(raw=self.raw[index], values=self.values[index], times=self.times[index],
                       strata=self.strata[index])

    def features(self) -> np.ndarray:
        """The model feature matrix of these samples."""
        return feature_matrix({name: self.raw[:, i] for i, name in enumerate(RAW_COLUMNS)})

    def stats(self) -> dict[str, float]:
        """Summary of the window these samples came from, for model-update metadata."""
        if len(self) == 0:
            return {"rows": 0, "strata": 0}
        return {"rows": len(self), "strata": len(set(self.strata.tolist())),
                "oldest_ts": float(self.times.min()), "newest_ts": float(self.times.max()),
                "value_mean_ms": float(self.values.mean()), "value_p50_ms": float(np.median(self.values))}
