"""The candidate servers of one decision as columns: what plugins read, without one object per server.

A :class:`ServerTable` is a sequence of :class:`~router.framework.roles.ServerSnapshot` (indexing builds the
snapshot on demand, or returns the original object when the table was made from snapshots). ``state``
holds one float64 column (counts too) per field of the contract's
:class:`~contract.server_state.ServerState`, by name; names are tuples, and the router's own numbers are
columns of their own. ``tightest_tpot_slo_ms`` is NaN where no request with a TPOT SLO is running;
``tpot_at_risk`` counts the running streams at risk of missing their TPOT SLO, each weighted by the chance
that it ends soon; ``latency_correction`` holds, per target (rows in ``TARGETS`` order) and server, the log factor
its predictions are corrected by, and ``prefill_ms_per_token`` its prefill pace. A table is a value: its columns are copies, never views of state that changes later.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, overload

import numpy as np

from headroom.contract.server_state import SERVER_FIELDS
from headroom.router.framework.roles import COLD_KV_USAGE, NO_CORRECTION, ServerSnapshot

_COUNTS = frozenset(name for name, raw in SERVER_FIELDS.items() if raw.kind == "count")


@dataclass(frozen=True, slots=True, eq=False)
class ServerTable(Sequence[ServerSnapshot]):
    server_id: tuple[str, ...]
    address: tuple[str, ...]
    pool_key: tuple[str, ...]
    state: Mapping[str, np.ndarray]  # field of ServerState -> column
    running_tpot_slos_ms: tuple[tuple[float, ...], ...]
    tightest_tpot_slo_ms: np.ndarray
    metrics_age_s: np.ndarray
    tpot_at_risk: np.ndarray
    latency_correction: np.ndarray  # (len(TARGETS), servers)
    prefill_ms_per_token: np.ndarray
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
            pool_key=tuple(s.pool_key for s in snaps), state={name: column(name) for name in SERVER_FIELDS},
            running_tpot_slos_ms=tuple(s.running_tpot_slos_ms for s in snaps),
            tightest_tpot_slo_ms=np.array([min(s.running_tpot_slos_ms, default=math.nan) for s in snaps],
                                          dtype=np.float64).reshape(len(snaps)),
            metrics_age_s=column("metrics_age_s"), tpot_at_risk=column("tpot_at_risk"),
            latency_correction=np.array([s.latency_correction for s in snaps], dtype=np.float64).reshape(
                len(snaps), len(NO_CORRECTION)).T, prefill_ms_per_token=column("prefill_ms_per_token"),
            originals=snaps)

    def take(self, rows: np.ndarray) -> ServerTable:
        """The servers at ``rows`` (row numbers), in that order."""
        picked = rows.tolist()
        return ServerTable(
            server_id=tuple(self.server_id[i] for i in picked), address=tuple(self.address[i] for i in picked),
            pool_key=tuple(self.pool_key[i] for i in picked),
            state={name: column[rows] for name, column in self.state.items()},
            running_tpot_slos_ms=tuple(self.running_tpot_slos_ms[i] for i in picked),
            tightest_tpot_slo_ms=self.tightest_tpot_slo_ms[rows], metrics_age_s=self.metrics_age_s[rows],
            tpot_at_risk=self.tpot_at_risk[rows], latency_correction=self.latency_correction[:, rows],
            prefill_ms_per_token=self.prefill_ms_per_token[rows],
            originals=None if self.originals is None else tuple(self.originals[i] for i in picked))

    def with_correction(self, latency_correction: np.ndarray, prefill_ms_per_token: np.ndarray) -> ServerTable:
        """The same servers with another ``latency_correction`` and prefill pace (e.g. the router's own, for a
        caller's candidates)."""
        return replace(self, latency_correction=latency_correction, prefill_ms_per_token=prefill_ms_per_token,
                       originals=None)

    @property
    def is_idle(self) -> np.ndarray:
        """Per server: nothing waiting, running, or in flight from this router."""
        state = self.state
        idle: np.ndarray = (state["num_waiting"] == 0) & (state["num_running"] == 0) & (state["inflight_requests"] == 0)
        return idle

    @property
    def is_cold(self) -> np.ndarray:
        return self.state["kv_cache_usage"] < COLD_KV_USAGE

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
        state: dict[str, Any] = {name: int(column.item(i)) if name in _COUNTS else float(column.item(i))
                                 for name, column in self.state.items()}
        return ServerSnapshot(
            server_id=self.server_id[i], address=self.address[i], pool_key=self.pool_key[i],
            running_tpot_slos_ms=self.running_tpot_slos_ms[i], metrics_age_s=float(self.metrics_age_s.item(i)),
            tpot_at_risk=float(self.tpot_at_risk.item(i)),
            latency_correction=tuple(self.latency_correction[:, i].tolist()),
            prefill_ms_per_token=float(self.prefill_ms_per_token.item(i)), **state)
