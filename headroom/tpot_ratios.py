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

import math

import numpy as np

MAX_RATIOS = 10_000  # per pool: the longest window a reader may ask for


class TpotRatios:
    """Per pool, the ratios got / predicted TPOT of the last ``capacity`` streams that completed, in a ring of
    ``capacity`` floats (80 KB at the default); the quantiles asked for are kept until the pool's next ratio."""

    def __init__(self, capacity: int = MAX_RATIOS):
        self.capacity = capacity
        self._rings: dict[str, np.ndarray] = {}
        self._counts: dict[str, int] = {}  # ratios ever added per pool; the next goes to count % capacity
        self._quantiles: dict[str, dict[tuple[float, int], float]] = {}

    def add(self, pool_key: str, predicted_ms: float, got_ms: float) -> None:
        """A stream placed with a TPOT prediction of ``predicted_ms`` completed with a TPOT of ``got_ms``; a ratio
        that is not a finite number is left out."""
        if not (predicted_ms > 0 and got_ms >= 0 and math.isfinite(predicted_ms)):
            return
        ratio = got_ms / predicted_ms
        if not math.isfinite(ratio):
            return
        ring = self._rings.get(pool_key)
        if ring is None:
            ring = self._rings[pool_key] = np.empty(self.capacity)
        count = self._counts.get(pool_key, 0)
        ring[count % self.capacity] = ratio
        self._counts[pool_key] = count + 1
        self._quantiles.pop(pool_key, None)

    def quantile(self, pool_key: str, q: float, window: int, least: int) -> float | None:
        """The ``q`` quantile of the pool's last ``window`` ratios; None while fewer than ``least`` are known."""
        count = self._counts.get(pool_key, 0)
        if count < least:
            return None
        known = self._quantiles.setdefault(pool_key, {})
        value = known.get((q, window))
        if value is None:
            value = known[(q, window)] = float(np.quantile(self._last(pool_key, min(window, count, self.capacity)), q))
        return value

    def _last(self, pool_key: str, n: int) -> np.ndarray:
        """The pool's last ``n`` ratios (in ring order: a quantile does not mind)."""
        ring, end = self._rings[pool_key], self._counts[pool_key] % self.capacity
        return ring[end - n:end] if n <= end else np.concatenate((ring[:end], ring[end - n:]))

    def __len__(self) -> int:
        return sum(min(count, self.capacity) for count in self._counts.values())
