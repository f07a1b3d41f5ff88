"""When a stream in flight is missing its TPOT SLO: the one rule the router and the simulator share.

A router relaying a stream sees its first token at ``first_s``, ``tokens`` tokens so far (the first
included) and the last one at ``last_s``. The stream is *over* its TPOT SLO at ``now`` when its time per
output token so far exceeds the SLO, or when it would even if its next token arrived right now — a stream
in that state needs faster steps (decode steps without a prefill beside them) before it ends, or it misses.

>>> tpot_over_slo(first_s=0.0, tokens=3, last_s=0.104, now=0.11, slo_ms=50.0)  # 52 ms per token so far
True
>>> tpot_over_slo(first_s=0.0, tokens=3, last_s=0.090, now=0.11, slo_ms=50.0)  # 45 ms so far, next due by 0.15
False
>>> tpot_over_slo(first_s=0.0, tokens=1, last_s=0.0, now=0.06, slo_ms=50.0)    # its second token is late
True
"""

from __future__ import annotations


def tpot_over_slo(first_s: float, tokens: int, last_s: float, now: float, slo_ms: float) -> bool:
    """Whether a stream is over its TPOT SLO at ``now`` (times in seconds, the SLO in ms)."""
    slo_s = slo_ms / 1000.0
    if tokens >= 2 and last_s - first_s > slo_s * (tokens - 1):
        return True
    return now - first_s > slo_s * max(tokens, 1)
