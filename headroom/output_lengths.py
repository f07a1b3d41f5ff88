"""What the streams that completed recently say of when a running stream will end: the lengths the router and
the simulator keep.

Whether a stream late for its TPOT SLO (:func:`contract.slo.tpot_at_risk`) actually misses depends on whether
it ends before it catches up. :class:`OutputLengths` keeps the lengths of the streams that completed
recently, and :meth:`OutputLengths.end_chance` is the chance that a stream ends within the next few tokens,
so the expected number of misses a new prefill would cause on a server is the sum of that chance over the
server's streams at risk.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import deque

from headroom.contract.slo import HORIZON_TOKENS

MIN_LENGTHS = 50  # completed streams needed before their lengths say when a stream ends


class OutputLengths:
    """The output lengths (tokens) of the last ``capacity`` streams that completed, and what they say of when a
    running stream will end.

    >>> lengths = OutputLengths()
    >>> for n in [2, 5, 8, 12, 20] * 20:
    ...     lengths.add(n)
    >>> lengths.end_chance(tokens=6)   # of the streams past 6 tokens, those that ended by 10: the 8s
    0.3333333333333333
    >>> lengths.end_chance(tokens=30)  # nothing has run that long: it may end any time
    1.0
    """

    def __init__(self, capacity: int = 1000):
        self.capacity = capacity
        self._recent: deque[int] = deque()
        self._sorted: list[int] = []

    def add(self, tokens: int) -> None:
        if tokens < 1:
            return
        self._recent.append(tokens)
        insort(self._sorted, tokens)
        if len(self._recent) > self.capacity:
            self._sorted.pop(bisect_left(self._sorted, self._recent.popleft()))

    def end_chance(self, tokens: int, horizon: int = HORIZON_TOKENS) -> float:
        """The chance that a stream with ``tokens`` so far ends within ``horizon`` more: 1 while too few lengths
        are known or none ran longer."""
        if len(self._sorted) < MIN_LENGTHS:
            return 1.0
        longer = len(self._sorted) - bisect_right(self._sorted, tokens)
        if not longer:
            return 1.0
        return (bisect_right(self._sorted, tokens + horizon) - bisect_right(self._sorted, tokens)) / longer

    def __len__(self) -> int:
        return len(self._recent)
