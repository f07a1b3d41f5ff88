"""The feature rows of a request on candidate servers: what the router asks the latency models about.

Each row is :func:`contract.features.feature_matrix` of the request's own raw columns
(:data:`REQUEST_COLUMNS`) beside what the router saw of one server (the :class:`~router.server_table.ServerTable`
columns of the other raw features).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from headroom.contract.features import RAW_COLUMNS, feature_matrix
from headroom.router.candidate_set import CandidateSet
from headroom.router.roles import Candidate, Request
from headroom.router.server_table import ServerTable

REQUEST_COLUMNS = ("prompt_tokens", "max_tokens")  # raw feature columns that come from the request, not the server


def candidate_features(request: Request, group: Sequence[Candidate]) -> np.ndarray:
    """The feature matrix of ``request`` on each candidate's server, one row per candidate."""
    cands = CandidateSet.of(group)
    return table_features(request, cands.servers, cands.member_rows())


def table_features(request: Request, table: ServerTable, rows: np.ndarray | None) -> np.ndarray:
    """Feature rows of ``request`` on the table's ``rows`` (None: every row, in order)."""

    def column(values: np.ndarray) -> np.ndarray:
        return values if rows is None else values[rows]

    n = len(table) if rows is None else len(rows)
    return feature_matrix({name: np.full(n, getattr(request, name), dtype=np.float32) if name in REQUEST_COLUMNS
                           else column(getattr(table, name)) for name in RAW_COLUMNS})
