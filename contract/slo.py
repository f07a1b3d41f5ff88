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
many steps ahead to recover in (:class:`headroom.output_lengths.OutputLengths` says how likely it is to end
within :data:`HORIZON_TOKENS`).

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
