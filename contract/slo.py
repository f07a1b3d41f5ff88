"""When a stream in flight is late for its TPOT SLO but can still make it: the rule the router and the
simulator share.

A router relaying a stream sees its first token at ``first_s``, ``tokens`` tokens so far (the first
included) and the last one at ``last_s``. Its *deficit* at ``now`` is how far it is behind its TPOT SLO:
the time its tokens took beyond ``slo_ms`` per token after the first, or, when its next token is overdue,
the time it would have taken had that token arrived right now. A stream is *at risk* when its deficit is
positive but at most one SLO interval: a decode step or two without a prefill beside them bring it back
under its SLO, and a new prefill landing on its server takes those steps away. A stream further behind
would need many such steps and is rarely saved by sparing one (a long stream that fell behind early).

Whether a stream at risk actually misses depends on whether it ends before it catches up: a long stream has
many steps ahead to recover in. :class:`OutputLengths` keeps the lengths of the streams that completed
recently, and :meth:`OutputLengths.end_chance` is the chance that a stream ends within the next few tokens,
so the expected number of misses a new prefill would cause on a server is the sum of that chance over the
server's streams at risk.

>>> tpot_at_risk(first_s=0.0, tokens=3, last_s=0.104, now=0.11, slo_ms=50.0)  # 52 ms per token so far
True
>>> tpot_at_risk(first_s=0.0, tokens=3, last_s=0.090, now=0.11, slo_ms=50.0)  # 45 ms so far, next due by 0.15
False
>>> tpot_at_risk(first_s=0.0, tokens=1, last_s=0.0, now=0.06, slo_ms=50.0)    # its second token is 10 ms late
True
>>> tpot_at_risk(first_s=0.0, tokens=41, last_s=2.4, now=2.41, slo_ms=50.0)   # 400 ms behind: beyond saving
False
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import deque

import numpy as np


def tpot_deficit_ms(first_s: float, tokens: int, last_s: float, now: float, slo_ms: float) -> float:
    """How far (ms) a stream is behind its TPOT SLO at ``now``; negative when it is ahead."""
    behind = (now - first_s) * 1000.0 - slo_ms * max(tokens, 1)
    if tokens >= 2:
        behind = max(behind, (last_s - first_s) * 1000.0 - slo_ms * (tokens - 1))
    return behind


def tpot_at_risk(first_s: float, tokens: int, last_s: float, now: float, slo_ms: float) -> bool:
    """Whether a stream is behind its TPOT SLO by at most one SLO interval at ``now`` (times in seconds)."""
    return 0.0 < tpot_deficit_ms(first_s, tokens, last_s, now, slo_ms) <= slo_ms


def tpot_at_risk_columns(first_s: np.ndarray, tokens: np.ndarray, last_s: np.ndarray, now: float,
                         slo_ms: np.ndarray) -> np.ndarray:
    """:func:`tpot_at_risk` of many streams at once (a column per argument but ``now``), as a boolean array: the
    same float64 operations in the same order, so the same answers."""
    behind = (now - first_s) * 1000.0 - slo_ms * np.maximum(tokens, 1)
    behind = np.where(tokens >= 2, np.maximum(behind, (last_s - first_s) * 1000.0 - slo_ms * (tokens - 1)), behind)
    at_risk: np.ndarray = (0.0 < behind) & (behind <= slo_ms)
    return at_risk


HORIZON_TOKENS = 4  # how many tokens a new prefill keeps a server's next step without prefill away, roughly
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
