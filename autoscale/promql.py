"""The small part of PromQL an autoscaling query needs: one aggregation over one series.

:func:`parse_query` reads ``sum(vllm:num_requests_waiting{namespace="llm"})`` (also ``avg``, ``max``,
``min``, with ``by (...)`` before or after, or the bare series) into a :class:`Query`. Anything richer
(``rate``, arithmetic, nested calls) raises :class:`~autoscale.errors.SpecError` naming the query, so a
replay never guesses. :func:`aggregates_with_max` spots a ``max()`` over servers anywhere in a query,
for the trap check, however the query is built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from headroom.autoscale.errors import SpecError

AGGREGATIONS = ("sum", "avg", "max", "min")
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_GROUP = r"(?:\s*(?:by|without)\s*\([^)]*\))?"
_SELECTOR = rf"(?P<series>{_NAME})\s*(?P<labels>\{{[^}}]*\}})?"
_AGGREGATED = re.compile(rf"^\s*(?P<op>{'|'.join(AGGREGATIONS)}){_GROUP}\s*\(\s*{_SELECTOR}\s*\){_GROUP}\s*$")
_BARE = re.compile(rf"^\s*{_SELECTOR}\s*$")
_MAX = re.compile(r"\bmax\s*(?:(?:by|without)\s*\([^)]*\)\s*)?\(")


@dataclass(frozen=True)
class Query:
    """``aggregation`` over the per-server values of ``series`` (``None``: the bare series)."""

    series: str
    aggregation: str | None
    text: str


def parse_query(text: str) -> Query:
    """The aggregation and series of ``text``; see the module docstring."""
    match = _AGGREGATED.match(text) or _BARE.match(text)
    if match is None:
        raise SpecError(f"query {text!r}: only one aggregation ({', '.join(AGGREGATIONS)}) over one series "
                        f"can be replayed")
    return Query(match["series"], match.groupdict().get("op"), text)


def aggregates_with_max(text: str) -> bool:
    """Whether ``text`` takes a ``max()`` (with or without grouping) anywhere."""
    return _MAX.search(text) is not None
