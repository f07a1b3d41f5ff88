"""How the TPOT streams got compares with the TPOT predicted for them: the rule the router and the simulator share.

The latency models predict a mean. Where a stream's TPOT is nearly what its server's mean says (long outputs
average over many decode steps) the mean is a fair verdict against a TPOT SLO; where it is bimodal (a short
stream in a burst is either decoded in clean steps or beside a prefill in every one) a mean below the SLO
hides that most such streams miss it. :class:`TpotRatios` keeps, per pool, the ratios of the TPOT completed
streams got to the TPOT predicted for them on the server they were sent to, and a high quantile of the recent
ratios is what a prediction has to be multiplied by to stand for that share of the streams.

>>> ratios = TpotRatios()
>>> for got in [20.0] * 80 + [52.0] * 20:
...     ratios.add("a", predicted_ms=40.0, got_ms=got)
>>> round(ratios.quantile("a", 0.9, window=100, least=50), 3)
1.3
>>> ratios.quantile("a", 0.9, window=100, least=200) is None  # too few known yet
True
"""

from __future__ import annotations

import itertools
import math
from collections import deque

import numpy as np

MAX_RATIOS = 10_000  # per pool: the longest window a reader may ask for


class TpotRatios:
    """Per pool, the ratios got / predicted TPOT of the last ``capacity`` streams that completed."""

    def __init__(self, capacity: int = MAX_RATIOS):
        self.capacity = capacity
        self._recent: dict[str, deque[float]] = {}
        self._quantiles: dict[tuple[str, float, int], float] = {}  # cleared by every add

    def add(self, pool_key: str, predicted_ms: float, got_ms: float) -> None:
        """A stream placed with a TPOT prediction of ``predicted_ms`` completed with a TPOT of ``got_ms``."""
        if not (predicted_ms > 0 and got_ms >= 0 and math.isfinite(predicted_ms) and math.isfinite(got_ms)):
            return
        self._recent.setdefault(pool_key, deque(maxlen=self.capacity)).append(got_ms / predicted_ms)
        self._quantiles.clear()

    def quantile(self, pool_key: str, q: float, window: int, least: int) -> float | None:
        """The ``q`` quantile of the pool's last ``window`` ratios; None while fewer than ``least`` are known."""
        recent = self._recent.get(pool_key, ())
        if len(recent) < least:
            return None
        key = (pool_key, q, window)
        if key not in self._quantiles:
            values = np.fromiter(itertools.islice(reversed(recent), window), dtype=np.float64)
            self._quantiles[key] = float(np.quantile(values, q))
        return self._quantiles[key]

    def __len__(self) -> int:
        return sum(len(recent) for recent in self._recent.values())
