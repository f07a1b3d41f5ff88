"""Request headers that steer scheduling, parsed strictly.

A router predicts every request unless it opts out with ``x-prediction-based-scheduling-off: true`` or
``x-prediction-based-scheduling: false``; one configured with ``predictAll: false`` predicts only those that
opt in with ``x-prediction-based-scheduling: true`` (opting out wins over opting in). ``x-slo-ttft-ms`` /
``x-slo-tpot-ms`` (aliases ``x-llm-d-slo-ttft-ms`` / ``x-llm-d-slo-tpot-ms``) are positive milliseconds up to
an hour (:data:`contract.server_state.MAX_LATENCY_MS`); ``x-request-priority`` is a plain decimal integer
(negative = sheddable); ``x-request-id`` names the request in telemetry and has at most 256 characters. A
malformed value raises :class:`~router.errors.RequestError` naming the header and the value; it is never
ignored. Header names are matched case-insensitively.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from headroom.contract.server_state import MAX_LATENCY_MS
from headroom.contract.telemetry import MAX_ID_CHARS, MAX_INTEGER
from headroom.router.errors import RequestError

OPT_IN = "x-prediction-based-scheduling"
OPT_OUT = "x-prediction-based-scheduling-off"
SLO_TTFT = ("x-slo-ttft-ms", "x-llm-d-slo-ttft-ms")
SLO_TPOT = ("x-slo-tpot-ms", "x-llm-d-slo-tpot-ms")
PRIORITY = "x-request-priority"
REQUEST_ID = "x-request-id"

_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
_DECIMAL = re.compile(r"[+-]?[0-9]{1,16}")  # no underscores, spaces or other digits than 0-9


@dataclass(frozen=True, slots=True)
class SchedulingHeaders:
    opted_in: bool = False
    opted_out: bool = False
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    priority: int = 0
    request_id: str | None = None


def parse_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> SchedulingHeaders:
    """The scheduling choices in ``headers`` (a mapping or ``(name, value)`` pairs)."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    lowered: dict[str, str] = {}
    for name, value in pairs:
        lowered[name.lower()] = value.strip()
    opt_in = _flag(lowered, OPT_IN)
    return SchedulingHeaders(
        opted_in=opt_in is True, opted_out=_flag(lowered, OPT_OUT) is True or opt_in is False,
        slo_ttft_ms=_slo(lowered, SLO_TTFT), slo_tpot_ms=_slo(lowered, SLO_TPOT),
        priority=_priority(lowered), request_id=_request_id(lowered))


def _flag(headers: Mapping[str, str], name: str) -> bool | None:
    """The header's true or false; None when it is absent."""
    value = headers.get(name)
    if value is None:
        return None
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise RequestError(f"header {name!r} must be true or false, got {value!r}")


def _slo(headers: Mapping[str, str], names: tuple[str, ...]) -> float | None:
    found = [(n, headers[n]) for n in names if n in headers]
    if not found:
        return None
    values = []
    for name, raw in found:
        try:
            value = float(raw)
        except ValueError:
            raise RequestError(f"header {name!r} must be a number of milliseconds, got {raw!r}") from None
        if not 0 < value <= MAX_LATENCY_MS:
            raise RequestError(f"header {name!r} must be a positive number of milliseconds up to "
                               f"{MAX_LATENCY_MS:.0f}, got {raw!r}")
        values.append(value)
    if len(set(values)) > 1:
        raise RequestError(f"headers {' and '.join(repr(n) for n, _ in found)} disagree: "
                           f"{' vs '.join(v for _, v in found)}")
    return values[0]


def _priority(headers: Mapping[str, str]) -> int:
    raw = headers.get(PRIORITY)
    if raw is None:
        return 0
    if not _DECIMAL.fullmatch(raw) or abs(int(raw)) > MAX_INTEGER:
        raise RequestError(f"header {PRIORITY!r} must be a decimal integer, got {raw[:40]!r}")
    return int(raw)


def _request_id(headers: Mapping[str, str]) -> str | None:
    value = headers.get(REQUEST_ID) or None
    if value is not None and len(value) > MAX_ID_CHARS:
        raise RequestError(f"header {REQUEST_ID!r} must have at most {MAX_ID_CHARS} characters, got {len(value)}")
    return value
