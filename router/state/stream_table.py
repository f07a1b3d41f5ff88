"""The streams with a TPOT SLO the router relays, as columns: which are at risk now is one vectorised pass.

Each stream has a slot in parallel arrays (its server, first and last token times, tokens so far, TPOT SLO
and the order it was first seen in), reused after it ends; when under a quarter of the slots handed out are
live, the live streams move to the front and the arrays shrink, so a decision after a burst scans the streams
left, not the most ever held (the moves cost as many drops did). :meth:`StreamTable.at_risk` evaluates the rule
over every slot at once (:func:`contract.slo.tpot_at_risk_columns`), which decides exactly as calling
:func:`contract.slo.tpot_at_risk` per stream would; the streams at risk are then weighted (one call per
distinct token count) and summed per server in the order they were first seen, so the sums are the ones a
walk over every stream in that order adds up.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from headroom.contract.slo import tpot_at_risk_columns

COLUMNS = ("_first", "_last", "_slo", "_tokens", "_order")


class StreamTable:
    def __init__(self, capacity: int = 64) -> None:
        self._capacity = capacity  # the arrays' smallest size
        self._slot: dict[str, int] = {}  # request id -> its slot
        self._free: list[int] = []
        self._used = 0  # slots handed out (live or free) since the last compaction: what a decision scans
        self._server_of: list[str] = []  # per slot
        self._first = np.zeros(capacity)
        self._last = np.zeros(capacity)
        self._slo = np.zeros(capacity)
        self._tokens = np.zeros(capacity, dtype=np.int64)
        self._order = np.zeros(capacity, dtype=np.int64)  # when first seen; 0: a free slot
        self._seen = 0

    def __len__(self) -> int:
        return len(self._slot)

    @property
    def slots(self) -> int:
        """The slots a decision scans: the live streams and the free slots among them."""
        return self._used

    def token(self, request_id: str, server_id: str, slo_ms: float, now: float, count: int = 1) -> None:
        """``count`` tokens of the stream ``request_id`` (on ``server_id``, held to ``slo_ms``) were relayed at
        ``now``."""
        slot = self._slot.get(request_id)
        if slot is not None:
            self._tokens[slot] += count
            self._last[slot] = now
            return
        slot = self._free.pop() if self._free else self._grow()
        self._slot[request_id] = slot
        self._server_of[slot] = server_id
        self._seen += 1
        self._first[slot] = self._last[slot] = now
        self._tokens[slot], self._slo[slot], self._order[slot] = count, slo_ms, self._seen

    def drop(self, request_id: str) -> None:
        """The stream ended (unknown ids: nothing happens)."""
        slot = self._slot.pop(request_id, None)
        if slot is not None:
            self._order[slot] = 0
            self._free.append(slot)
            if self._used > self._capacity and 4 * len(self._slot) < self._used:
                self._compact()

    def at_risk(self, now: float, weight: Callable[[int], float]) -> dict[str, float]:
        """Per server with any: its streams at risk of missing their TPOT SLO at ``now``
        (:func:`contract.slo.tpot_at_risk`), each counted as ``weight(tokens so far)``."""
        if not self._slot:  # no stream is live: none is at risk (most decisions, when few requests stream)
            return {}
        n = self._used
        at_risk = tpot_at_risk_columns(self._first[:n], self._tokens[:n], self._last[:n], now, self._slo[:n])
        risky = np.flatnonzero(at_risk & (self._order[:n] > 0))
        risky = risky[np.argsort(self._order[risky])]  # orders are distinct: first seen first
        counts, which = np.unique(self._tokens[risky], return_inverse=True)
        weights = [weight(count) for count in counts.tolist()]  # one call per distinct token count
        sums: dict[str, float] = {}
        for slot, index in zip(risky.tolist(), which.tolist()):
            server_id = self._server_of[slot]
            sums[server_id] = sums.get(server_id, 0) + weights[index]
        return {server_id: total for server_id, total in sums.items() if total}

    def _grow(self) -> int:
        if self._used == len(self._first):
            size = 2 * len(self._first)
            self._resize(size, np.arange(self._used))
        self._server_of.append("")
        self._used += 1
        return self._used - 1

    def _compact(self) -> None:
        """Move the live streams to the first slots (in any order: ``_order`` keeps theirs) and shrink."""
        ids = list(self._slot)
        live = np.array([self._slot[rid] for rid in ids], dtype=np.int64)
        self._resize(max(self._capacity, 2 * len(ids)), live)
        self._server_of = [self._server_of[slot] for slot in live.tolist()]
        self._slot = dict(zip(ids, range(len(ids))))
        self._free.clear()
        self._used = len(ids)

    def _resize(self, size: int, kept: np.ndarray) -> None:
        """Columns of ``size`` slots holding the slots ``kept`` of the old ones first, in that order."""
        for name in COLUMNS:
            old = getattr(self, name)
            resized = np.zeros(size, dtype=old.dtype)
            resized[:len(kept)] = old[kept]
            setattr(self, name, resized)
