"""Reading a model server's Prometheus ``/metrics`` text into :class:`~contract.server_metrics.ServerMetrics`,
by the series :data:`contract.server_metrics.SERIES` declares (vLLM's, JetStream's, the accelerator's memory).

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
    SAMPLE_NAMES,
    SCRAPED_STATE,
    SERIES,
    ServerMetrics,
)
from headroom.contract.server_state import KIND_RANGES, SERVER_FIELDS
from headroom.errors import HeadroomError

_BY_NAME = {s.name: s for s in SERIES}
_KIND_NAMES = {kind: [s.name for s in SERIES if s.server == kind] for kind in KINDS}


class MetricsFormatError(HeadroomError, ValueError):
    """The metrics text is not Prometheus text, or carries no metric the router understands."""


def parse_metrics(text: str) -> ServerMetrics:
    """The declared series in Prometheus exposition ``text``, read into :class:`ServerMetrics`."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(SAMPLE_NAMES):
            name, value = _sample(line)
            if name in _BY_NAME:
                samples[name] = _combine(samples.get(name), value, _BY_NAME[name].combine)
    kind = next((kind for kind, names in _KIND_NAMES.items() if any(n in samples for n in names)), None)
    if kind is None:
        names = ", ".join(n for names in _KIND_NAMES.values() for n in names)
        raise MetricsFormatError(f"none of the metrics {names} is present")
    read: dict[str, float] = {}
    for name, value in samples.items():
        series = _BY_NAME[name]
        fed = series.feeds if series.server == kind and series.feeds not in (None, series.field) else None
        for field in (series.field, fed) if fed else (series.field,):
            read[field] = _combine(read.get(field), value, series.combine)
    values: dict[str, Any] = {name: 0 if name in SCRAPED_STATE else None for name in METRIC_FIELDS}
    for field, value in read.items():
        values[field] = max(0, int(round(value))) if METRIC_FIELDS[field] else value
    for field in SCRAPED_STATE:  # within the range the server state allows
        low, high = KIND_RANGES[SERVER_FIELDS[field].kind]
        values[field] = min(high, max(low, values[field]))
    return ServerMetrics(**values)


def _combine(seen: float | None, value: float, how: str) -> float:
    return value if seen is None else max(seen, value) if how == MAX else seen + value


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
