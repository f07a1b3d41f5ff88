"""The candidates of one decision as columns, and their scores: how plugins read many servers at once.

A :class:`CandidateSet` is a sequence of :class:`~router.framework.roles.Candidate` over a
:class:`~router.framework.server_table.ServerTable`: ``rows`` says which of the table's servers are members, in
candidate order, and the prediction columns hold one value per table row (NaN where there is none:
no prediction, no E2E prediction, or a headroom that does not apply). Filters narrow a set with
:meth:`CandidateSet.take` without copying any column; the producer adds predictions with
:meth:`CandidateSet.with_predictions`. Indexing builds the :class:`~router.framework.roles.Candidate` on demand, or
returns the original object when the set was made from candidates (:meth:`CandidateSet.of`), so a
plugin given plain candidates hands the same objects back.

:class:`ScoredSet` pairs a candidate set with its score column, as a sequence of
:class:`~router.framework.roles.Scored`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import overload

import numpy as np

from headroom.contract.targets import response_ms
from headroom.router.framework.roles import NO_CORRECTION, Candidate, Prediction, Scored, ServerSnapshot
from headroom.router.framework.server_table import ServerTable

NO_VERSIONS: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True, eq=False)
class CandidateSet(Sequence[Candidate]):
    servers: ServerTable
    rows: np.ndarray | None  # member rows of ``servers`` in candidate order; None = every row, in order
    predicted: np.ndarray  # the columns below are per row of ``servers``
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    e2e_ms: np.ndarray
    ttft_headroom_ms_by_row: np.ndarray
    tpot_headroom_ms_by_row: np.ndarray
    fallback_reason_by_row: tuple[str | None, ...]
    versions_by_row: tuple[Mapping[str, int], ...]
    originals: tuple[Candidate, ...] | None = field(default=None, repr=False)  # per row of ``servers``
    # per target (rows) and row of ``servers``, the log factor the models' predictions were corrected by (the
    # server's latency correction and, where it bound, its prefill pace); None: not corrected
    correction: np.ndarray | None = None

    @classmethod
    def unpredicted(cls, servers: Sequence[ServerSnapshot]) -> CandidateSet:
        """Every server of ``servers`` (a :class:`ServerTable` or snapshots) as a candidate without prediction."""
        table = ServerTable.of(servers)
        n = len(table)
        missing = np.full(n, math.nan)
        return cls(table, None, np.zeros(n, dtype=bool), missing, missing, missing, missing, missing,
                   (None,) * n, (NO_VERSIONS,) * n)

    @classmethod
    def of(cls, candidates: Sequence[Candidate]) -> CandidateSet:
        """The set of ``candidates`` (returned as is when it already is one)."""
        if isinstance(candidates, CandidateSet):
            return candidates
        cands = tuple(candidates)
        n = len(cands)

        def column(values: list[float | None]) -> np.ndarray:
            return np.array([math.nan if v is None else v for v in values], dtype=np.float64).reshape(n)

        predictions = [c.prediction for c in cands]
        return cls(ServerTable.of([c.server for c in cands]), None,
                   np.array([p is not None for p in predictions], dtype=bool).reshape(n),
                   column([p.ttft_ms if p else None for p in predictions]),
                   column([p.tpot_ms if p else None for p in predictions]),
                   column([p.e2e_ms if p else None for p in predictions]),
                   column([c.ttft_headroom_ms for c in cands]), column([c.tpot_headroom_ms for c in cands]),
                   tuple(c.fallback_reason for c in cands),
                   tuple(p.versions if p else NO_VERSIONS for p in predictions), cands)

    def with_predictions(self, predicted: np.ndarray, ttft_ms: np.ndarray, tpot_ms: np.ndarray,
                         e2e_ms: np.ndarray, ttft_headroom_ms: np.ndarray, tpot_headroom_ms: np.ndarray,
                         fallback_reasons: tuple[str | None, ...], versions: tuple[Mapping[str, int], ...],
                         correction: np.ndarray | None = None) -> CandidateSet:
        """The same members with new prediction columns (each one value per row of ``servers``), and the log
        factors per target they were corrected by (:attr:`correction`)."""
        return CandidateSet(self.servers, self.rows, predicted, ttft_ms, tpot_ms, e2e_ms, ttft_headroom_ms,
                            tpot_headroom_ms, fallback_reasons, versions, correction=correction)

    def take(self, positions: np.ndarray) -> CandidateSet:
        """The members at ``positions`` (indices into this set), in that order."""
        rows = positions if self.rows is None else self.rows[positions]
        return CandidateSet(self.servers, rows, self.predicted, self.ttft_ms, self.tpot_ms, self.e2e_ms,
                            self.ttft_headroom_ms_by_row, self.tpot_headroom_ms_by_row,
                            self.fallback_reason_by_row, self.versions_by_row, self.originals, self.correction)

    def member_rows(self) -> np.ndarray:
        """Row numbers of ``servers`` of the members, in candidate order."""
        return np.arange(len(self.servers)) if self.rows is None else self.rows

    def column(self, by_row: np.ndarray) -> np.ndarray:
        """A per-row column of this set's table, in candidate order."""
        return by_row if self.rows is None else by_row[self.rows]

    @property
    def is_predicted(self) -> np.ndarray:
        return self.column(self.predicted)

    @property
    def ttft_headroom_ms(self) -> np.ndarray:
        return self.column(self.ttft_headroom_ms_by_row)

    @property
    def tpot_headroom_ms(self) -> np.ndarray:
        return self.column(self.tpot_headroom_ms_by_row)

    def response_ms(self, stream: bool) -> np.ndarray:
        """Per member, when the response starts (:func:`contract.targets.response_ms`; NaN where unpredicted)."""
        return response_ms(stream, self.column(self.ttft_ms), self.column(self.e2e_ms))

    def slo_verdicts(self) -> tuple[np.ndarray, np.ndarray]:
        """Per member, whether :attr:`~router.framework.roles.Candidate.meets_slo` is known, and whether it is True."""
        ttft, tpot = self.ttft_headroom_ms, self.tpot_headroom_ms
        no_ttft, no_tpot = np.isnan(ttft), np.isnan(tpot)
        known = self.is_predicted & ~(no_ttft & no_tpot)
        meets = known & (no_ttft | (ttft >= 0)) & (no_tpot | (tpot >= 0))
        return known, meets

    def server_column(self, name: str) -> np.ndarray:
        """The members' values of one field of the servers' state, e.g. ``"kv_cache_usage"``."""
        return self.column(self.servers.state[name])

    @property
    def tpot_at_risk(self) -> np.ndarray:
        """Per member, the expected misses among the router's streams there (:attr:`ServerTable.tpot_at_risk`)."""
        return self.column(self.servers.tpot_at_risk)

    def pool_keys(self) -> list[str]:
        keys = self.servers.pool_key
        return list(keys) if self.rows is None else [keys[i] for i in self.rows.tolist()]

    def fallback_reasons(self) -> list[str | None]:
        reasons = self.fallback_reason_by_row
        return list(reasons) if self.rows is None else [reasons[i] for i in self.rows.tolist()]

    def __len__(self) -> int:
        return len(self.servers) if self.rows is None else len(self.rows)

    @overload
    def __getitem__(self, index: int) -> Candidate: ...

    @overload
    def __getitem__(self, index: slice) -> list[Candidate]: ...

    def __getitem__(self, index: int | slice) -> Candidate | list[Candidate]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        position = range(len(self))[index]  # IndexError when out of range
        row = position if self.rows is None else int(self.rows[position])
        if self.originals is not None:
            return self.originals[row]
        prediction = None
        if self.predicted.item(row):  # .item: Python values, without a NumPy scalar each
            e2e = self.e2e_ms.item(row)
            correction = NO_CORRECTION if self.correction is None else tuple(self.correction[:, row].tolist())
            prediction = Prediction(self.ttft_ms.item(row), self.tpot_ms.item(row), None if math.isnan(e2e) else e2e,
                                    self.versions_by_row[row], correction)
        return Candidate(self.servers[row], prediction, _optional(self.ttft_headroom_ms_by_row.item(row)),
                         _optional(self.tpot_headroom_ms_by_row.item(row)), self.fallback_reason_by_row[row])


@dataclass(frozen=True, slots=True, eq=False)
class ScoredSet(Sequence[Scored]):
    """Candidates with their scores (one per member, in candidate order)."""

    candidates: CandidateSet
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.scores)

    @overload
    def __getitem__(self, index: int) -> Scored: ...

    @overload
    def __getitem__(self, index: slice) -> list[Scored]: ...

    def __getitem__(self, index: int | slice) -> Scored | list[Scored]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return Scored(self.candidates[index], float(self.scores[index]))


def score_column(scored: Sequence[Scored]) -> np.ndarray:
    """The scores of ``scored`` as an array, without building objects when it is a :class:`ScoredSet`."""
    if isinstance(scored, ScoredSet):
        return scored.scores
    return np.array([s.score for s in scored], dtype=np.float64).reshape(len(scored))


def _optional(value: float) -> float | None:
    return None if math.isnan(value) else float(value)
