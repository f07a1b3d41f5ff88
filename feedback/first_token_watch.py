"""A server that stalls, seen from its latest streams: it teaches nothing otherwise, since its streams' first tokens
do not come, and neither do the ratios :class:`~feedback.latency_corrections.LatencyCorrections` learns from.

:class:`FirstTokenWatch` keeps, per server, its last :data:`RECENT` streams whose first token the router sees (it
relays them), each with the model's TTFT prediction it was placed with: a stream answered counts its ratio ``TTFT /
predicted``; a stream still waiting counts ``waited / predicted``, the least its ratio can become. The lower
quartile of the lot is then a lower bound of what all but a quarter of those streams take. While one of them has
waited more than :data:`STALLED` times its prediction and that bound is above :data:`STALLED` too (most of the
latest streams at least that late), the server's TTFT is priced at least that slow
(:meth:`FirstTokenWatch.overdue`); until a stream waits that long, nothing is computed. The latest streams dispatched, not those still
waiting: the waiting are the slow ones of any server (the quick ones have left), the latest are not. Below
:data:`STALLED`, late first tokens are the corrections' to learn as they come: over 120 simulated runs of five
regime changes, pricing a server by its median or lower quartile ratio once above 1 met all three goals in 52 and
53 runs, against 55 without; with :data:`STALLED` it changed none of them.
A stream that ends before its first token is seen (cut, or answered whole) is left out.

Times are the caller's (monotonic seconds in the router, virtual ones in the simulator).

>>> watch = FirstTokenWatch()
>>> for i, predicted_ms in enumerate((100.0, 100.0, 200.0)):
...     watch.dispatched("s1", f"r{i}", now=10.0, predicted_ms=predicted_ms)
>>> watch.overdue(now=10.15)  # 1.5x, 1.5x and 0.75x their predictions: not stalled
{}
>>> watch.first_token("s1", "r0", ttft_ms=500.0)
>>> {sid: round(math.exp(factor), 2) for sid, factor in watch.overdue(now=10.6).items()}  # 5, 6 and 3
{'s1': 3.0}
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from headroom.feedback.latency_corrections import MAX_FACTOR

RECENT = 6  # streams kept per server
LEAST = 2  # streams kept before they say anything of their server
STALLED = 2.0  # the least ratio (lower quartile of the latest streams) that prices a server


@dataclass(slots=True)
class _Stream:
    key: str
    dispatched: float
    predicted_ms: float
    ttft_ms: float | None = None  # None while it waits

    def ratio(self, now: float) -> float:
        """Its TTFT over its prediction; while it waits, the least that can become."""
        waited_ms = (now - self.dispatched) * 1000.0 if self.ttft_ms is None else self.ttft_ms
        return waited_ms / self.predicted_ms


class FirstTokenWatch:
    """Per server, its latest streams, and when the first of those waiting will be :data:`STALLED` times late."""

    def __init__(self) -> None:
        self._recent: dict[str, deque[_Stream]] = {}
        self._stalls_at: dict[str, float] = {}  # the servers with a recent stream waiting: the earliest such time

    def dispatched(self, server_id: str, key: str, now: float, predicted_ms: float) -> None:
        """The stream ``key`` went to ``server_id`` at ``now``; the model predicted its TTFT there at ``predicted_ms``
        (one not positive and finite is not watched)."""
        if not (predicted_ms > 0 and math.isfinite(predicted_ms)):
            return
        recent = self._recent.setdefault(server_id, deque(maxlen=RECENT))
        recent.append(_Stream(key, now, predicted_ms))
        self._waited(server_id)

    def first_token(self, server_id: str, key: str, ttft_ms: float) -> None:
        """The stream's first token came ``ttft_ms`` after its dispatch."""
        stream = self._find(server_id, key)
        if stream is not None and stream.ttft_ms is None:
            stream.ttft_ms = ttft_ms
            self._waited(server_id)

    def ended(self, server_id: str, key: str) -> None:
        """The stream ended; if no first token was seen, it says nothing and is left out."""
        stream = self._find(server_id, key)
        if stream is not None and stream.ttft_ms is None:
            self._recent[server_id].remove(stream)
            self._waited(server_id)

    def overdue(self, now: float) -> dict[str, float]:
        """Per server with a stream waiting past :data:`STALLED` times its prediction at ``now``, whose latest streams'
        lower quartile ratio is above :data:`STALLED` too: the log of that ratio (at most ``log(MAX_FACTOR)``), the
        least its TTFT log factor can be."""
        overdue = {}
        for server_id, stalls_at in self._stalls_at.items():
            recent = self._recent[server_id]
            if stalls_at >= now or len(recent) < LEAST:
                continue
            ratios = sorted(stream.ratio(now) for stream in recent)
            late = ratios[(len(ratios) - 1) // 4]  # the lower quartile: most of them are at least this late
            if late > STALLED:
                overdue[server_id] = math.log(min(late, MAX_FACTOR))
        return overdue

    def forget(self, server_id: str) -> None:
        """A server left the pool."""
        self._recent.pop(server_id, None)
        self._stalls_at.pop(server_id, None)

    def _waited(self, server_id: str) -> None:
        """The server's streams changed: when the first of those waiting will be :data:`STALLED` times late."""
        stalls_at = min((stream.dispatched + STALLED * stream.predicted_ms / 1000.0
                         for stream in self._recent[server_id] if stream.ttft_ms is None), default=None)
        if stalls_at is None:
            self._stalls_at.pop(server_id, None)
        else:
            self._stalls_at[server_id] = stalls_at

    def _find(self, server_id: str, key: str) -> _Stream | None:
        for stream in self._recent.get(server_id, ()):
            if stream.key == key:
                return stream
        return None
