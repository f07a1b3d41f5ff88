"""Reading a model server's Prometheus ``/metrics`` text into :class:`~contract.server_metrics.ServerMetrics`,
by the series :mod:`contract.server_metrics` declares the router reads (``READ``: vLLM's, JetStream's, the
accelerator's memory).

Label sets (several models on one server) are summed, or take the maximum, as each series says. The server is
of the first kind whose series it exposes, and its series of that kind feed the scheduling fields (usage,
waiting, running: 0 when absent); every series present is read into its own field too. Usage is clamped to
0-1 and counts to integers of at least 0. Text that names no series of any kind raises
:class:`MetricsFormatError`. Only the lines of declared series are parsed (a server exports dozens of others,
scraped every 50 ms), and those strictly: ``name{labels} value [timestamp]`` or ``name value [timestamp]``.
"""

from __future__ import annotations

from typing import Any

from headroom.contract.server_metrics import (
    KINDS,
    MAX,
    METRIC_FIELDS,
    READ,
    SAMPLE_NAMES,
    SCRAPED_STATE,
    ServerMetrics,
)
from headroom.contract.server_state import KIND_RANGES, SERVER_FIELDS
from headroom.errors import HeadroomError

_MAX = {s.name: s.combine == MAX for s in READ}  # each declared series: whether its label sets take the max
_KIND_NAMES = {kind: [s.name for s in READ if s.server == kind] for kind in KINDS}
# on a server of each kind, each series with the fields it goes to: its own, and the one it feeds there
_PLAN: dict[str, tuple[tuple[str, tuple[str, ...], bool], ...]] = {
    kind: tuple((s.name, (s.field, s.feeds) if s.server == kind and s.feeds and s.feeds != s.field else (s.field,),
                 s.combine == MAX) for s in READ) for kind in KINDS}
_UNREPORTED = {name: 0 if name in SCRAPED_STATE else None for name in METRIC_FIELDS}
_COUNTS = frozenset(name for name, counts in METRIC_FIELDS.items() if counts)
_BOUNDS = tuple((name, *KIND_RANGES[SERVER_FIELDS[name].kind]) for name in SCRAPED_STATE)


class MetricsFormatError(HeadroomError, ValueError):
    """The metrics text is not Prometheus text, or carries no metric the router understands."""


def parse_metrics(text: str) -> ServerMetrics:
    """The declared series in Prometheus exposition ``text``, read into :class:`ServerMetrics`."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(SAMPLE_NAMES):
            name, value = _sample(line)
            peak = _MAX.get(name)
            if peak is not None:
                seen = samples.get(name)
                samples[name] = value if seen is None else max(seen, value) if peak else seen + value
    kind = next((kind for kind, names in _KIND_NAMES.items() if any(n in samples for n in names)), None)
    if kind is None:
        names = ", ".join(n for names in _KIND_NAMES.values() for n in names)
        raise MetricsFormatError(f"none of the metrics {names} is present")
    read: dict[str, float] = {}
    for name, fields, peak in _PLAN[kind]:
        sampled = samples.get(name)
        if sampled is not None:
            for field in fields:
                seen = read.get(field)
                read[field] = sampled if seen is None else max(seen, sampled) if peak else seen + sampled
    values: dict[str, Any] = dict(_UNREPORTED)
    for field, value in read.items():
        values[field] = max(0, int(round(value))) if field in _COUNTS else value
    for field, low, high in _BOUNDS:  # within the range the server state allows
        values[field] = min(high, max(low, values[field]))
    return ServerMetrics(**values)


def _sample(line: str) -> tuple[str, float]:
    """The name and value of a sample line (labels are skipped: the value follows the last ``}``)."""
    brace, space = line.find("{"), line.find(" ")
    if brace != -1 and (space == -1 or brace < space):
        name, closed = line[:brace], line.rfind("}")
        fields = line[closed + 1:].split() if closed > brace else []
    else:
        name, fields = (line[:space], line[space:].split()) if space != -1 else (line, [])
    try:
        if not fields or len(fields) > 2:
            raise ValueError("expected a value and an optional timestamp")
        return name, float(fields[0])
    except ValueError as err:
        raise MetricsFormatError(f"not Prometheus text: {line!r}: {err}") from None
