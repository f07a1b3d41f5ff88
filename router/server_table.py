"""The candidate servers of one decision as columns: what plugins read, without one object per server.

A :class:`ServerTable` is a sequence of :class:`~router.roles.ServerSnapshot` (indexing builds the
snapshot on demand, or returns the original object when the table was made from snapshots), and it
exposes each snapshot field as a column: a tuple for names, a float64 array for numbers (counts too).
``tightest_tpot_slo_ms`` is NaN where no request with a TPOT SLO is running. A table is a value: its
columns are copies, never views of state that changes later.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np

from headroom.router.roles import COLD_KV_USAGE, ServerSnapshot


@dataclass(frozen=True, slots=True, eq=False)
class ServerTable(Sequence[ServerSnapshot]):
    server_id: tuple[str, ...]
    address: tuple[str, ...]
    pool_key: tuple[str, ...]
    kv_cache_usage: np.ndarray
    num_waiting: np.ndarray
    num_running: np.ndarray
    prefix_match: np.ndarray
    inflight_requests: np.ndarray
    inflight_prompt_tokens: np.ndarray
    running_tpot_slos_ms: tuple[tuple[float, ...], ...]
    tightest_tpot_slo_ms: np.ndarray
    metrics_age_s: np.ndarray
    inflight_prefill_tokens: np.ndarray
    last_token_age_ms: np.ndarray
    token_interval_ms: np.ndarray
    originals: tuple[ServerSnapshot, ...] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, snapshots: Sequence[ServerSnapshot]) -> ServerTable:
        """The table of ``snapshots`` (returned as is when it already is one)."""
        if isinstance(snapshots, ServerTable):
            return snapshots
        snaps = tuple(snapshots)

        def column(name: str) -> np.ndarray:
            return np.array([getattr(s, name) for s in snaps], dtype=np.float64).reshape(len(snaps))

        return cls(
            server_id=tuple(s.server_id for s in snaps), address=tuple(s.address for s in snaps),
            pool_key=tuple(s.pool_key for s in snaps), kv_cache_usage=column("kv_cache_usage"),
            num_waiting=column("num_waiting"), num_running=column("num_running"),
            prefix_match=column("prefix_match"), inflight_requests=column("inflight_requests"),
            inflight_prompt_tokens=column("inflight_prompt_tokens"),
            running_tpot_slos_ms=tuple(s.running_tpot_slos_ms for s in snaps),
            tightest_tpot_slo_ms=np.array([min(s.running_tpot_slos_ms, default=math.nan) for s in snaps],
                                          dtype=np.float64).reshape(len(snaps)),
            metrics_age_s=column("metrics_age_s"), inflight_prefill_tokens=column("inflight_prefill_tokens"),
            last_token_age_ms=column("last_token_age_ms"), token_interval_ms=column("token_interval_ms"),
            originals=snaps)

    def take(self, rows: np.ndarray) -> ServerTable:
        """The servers at ``rows`` (row numbers), in that order."""
        picked = rows.tolist()
        return ServerTable(
            tuple(self.server_id[i] for i in picked), tuple(self.address[i] for i in picked),
            tuple(self.pool_key[i] for i in picked), self.kv_cache_usage[rows], self.num_waiting[rows],
            self.num_running[rows], self.prefix_match[rows], self.inflight_requests[rows],
            self.inflight_prompt_tokens[rows], tuple(self.running_tpot_slos_ms[i] for i in picked),
            self.tightest_tpot_slo_ms[rows], self.metrics_age_s[rows], self.inflight_prefill_tokens[rows],
            self.last_token_age_ms[rows], self.token_interval_ms[rows],
            None if self.originals is None else tuple(self.originals[i] for i in picked))

    @property
    def is_idle(self) -> np.ndarray:
        """Per server: nothing waiting, running, or in flight from this router."""
        idle: np.ndarray = (self.num_waiting == 0) & (self.num_running == 0) & (self.inflight_requests == 0)
        return idle

    @property
    def is_cold(self) -> np.ndarray:
        return self.kv_cache_usage < COLD_KV_USAGE

    def __len__(self) -> int:
        return len(self.server_id)

    @overload
    def __getitem__(self, index: int) -> ServerSnapshot: ...

    @overload
    def __getitem__(self, index: slice) -> list[ServerSnapshot]: ...

    def __getitem__(self, index: int | slice) -> ServerSnapshot | list[ServerSnapshot]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if self.originals is not None:
            return self.originals[index]
        i = range(len(self))[index]  # IndexError when out of range
        return ServerSnapshot(
            self.server_id[i], self.address[i], self.pool_key[i], float(self.kv_cache_usage[i]),
            int(self.num_waiting[i]), int(self.num_running[i]), float(self.prefix_match[i]),
            int(self.inflight_requests[i]), int(self.inflight_prompt_tokens[i]), self.running_tpot_slos_ms[i],
            float(self.metrics_age_s[i]), int(self.inflight_prefill_tokens[i]), float(self.last_token_age_ms[i]),
            float(self.token_interval_ms[i]))
