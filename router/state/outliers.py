"""Passive outlier detection: servers that keep failing the requests sent to them are ejected for a while.

Every proxied attempt reports its outcome. ``consecutive_failures`` failures in a row (a 5xx answer, a
refused or reset connection, a timeout) eject the server for ``base_ejection_s`` × 2^(ejections so far),
at most ``max_ejection_s``; a success resets the count. An ejected server is not a candidate until its
ejection ends, then it is on probation: one failure ejects it again, for longer, until
``probation_successes`` successes in a row clear its record. No more than
``max_ejected_fraction`` of the pool is ejected at once, so a pool-wide fault degrades to serving errors
rather than to serving nothing. Time is passed in.

>>> outliers = Outliers(OutlierPolicy(consecutive_failures=2, base_ejection_s=10.0))
>>> outliers.failed("a", now=0.0, pool_size=4), outliers.failed("a", now=1.0, pool_size=4)
(None, 11.0)
>>> outliers.ejected(now=5.0), outliers.ejected(now=12.0)
({'a': 11.0}, {})
>>> outliers.failed("a", now=12.0, pool_size=4)  # on probation: one failure, twice as long
32.0
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class OutlierPolicy:
    consecutive_failures: int = 3
    base_ejection_s: float = 10.0
    max_ejection_s: float = 300.0
    max_ejected_fraction: float = 0.5
    probation_successes: int = 5

    def __post_init__(self) -> None:
        if self.consecutive_failures < 1 or self.base_ejection_s <= 0 or self.max_ejection_s < self.base_ejection_s:
            raise ValueError(f"outlier detection needs at least one failure and positive ejection times, got {self}")
        if not 0.0 <= self.max_ejected_fraction <= 1.0:
            raise ValueError(f"max ejected fraction must be within [0, 1], got {self.max_ejected_fraction}")


@dataclass
class _Health:
    failures: int = 0  # consecutive
    successes: int = 0  # consecutive
    ejections: int = 0  # since its record was last cleared; the next ejection lasts base × 2^ejections
    until: float = 0.0  # ejected until then


@dataclass
class Outliers:
    policy: OutlierPolicy = field(default_factory=OutlierPolicy)
    total_ejections: int = 0
    _servers: dict[str, _Health] = field(default_factory=dict)

    def succeeded(self, server_id: str) -> None:
        health = self._servers.get(server_id)
        if health is not None:
            health.failures = 0
            health.successes += 1
            if health.successes >= self.policy.probation_successes:
                health.ejections = 0

    def failed(self, server_id: str, now: float, pool_size: int) -> float | None:
        """Count a failure; the end of the server's ejection if it is ejected now, else None."""
        health = self._servers.setdefault(server_id, _Health())
        if health.until > now:
            return None  # already out: a failure of a request sent before the ejection
        health.failures += 1
        health.successes = 0
        if health.failures < self.policy.consecutive_failures and not health.ejections:  # not on probation
            return None
        if len(self.ejected(now)) + 1 > self.policy.max_ejected_fraction * pool_size:
            return None
        health.until = now + min(self.policy.max_ejection_s, self.policy.base_ejection_s * 2 ** health.ejections)
        health.ejections += 1
        health.failures = 0
        self.total_ejections += 1
        return health.until

    def until(self, server_id: str) -> float:
        """When the server's current or last ejection ends (0: never ejected)."""
        health = self._servers.get(server_id)
        return health.until if health is not None else 0.0

    def ejected(self, now: float) -> dict[str, float]:
        """Servers ejected at ``now``, with the end of their ejection."""
        return {sid: h.until for sid, h in self._servers.items() if h.until > now}

    def forget(self, server_id: str) -> None:
        self._servers.pop(server_id, None)
