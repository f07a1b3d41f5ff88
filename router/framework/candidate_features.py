"""The feature rows of a request on candidate servers: what the router asks the latency models about.

Each row is :func:`contract.features.feature_matrix` of the request's own raw features
(:data:`contract.features.REQUEST_FIELDS`) beside what the router saw of one server (its
:class:`~router.framework.server_table.ServerTable` state columns).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from headroom.contract.features import RAW_COLUMNS, REQUEST_FIELDS, feature_matrix
from headroom.router.framework.candidate_set import CandidateSet
from headroom.router.framework.roles import Candidate, Request
from headroom.router.framework.server_table import ServerTable


def candidate_features(request: Request, group: Sequence[Candidate]) -> np.ndarray:
    """The feature matrix of ``request`` on each candidate's server, one row per candidate."""
    cands = CandidateSet.of(group)
    return table_features(request, cands.servers, cands.member_rows())


def table_features(request: Request, table: ServerTable, rows: np.ndarray | None) -> np.ndarray:
    """Feature rows of ``request`` on the table's ``rows`` (None: every row, in order)."""

    state = table.state
    n = len(table) if rows is None else len(rows)
    return feature_matrix({name: getattr(request, name) if name in REQUEST_FIELDS  # the same in every row
                           else state[name] if rows is None else state[name][rows] for name in RAW_COLUMNS}, n)
