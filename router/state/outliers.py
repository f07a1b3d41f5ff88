"""Passive outlier detection: servers that keep failing the requests sent to them are ejected for a while.

Every proxied attempt reports its outcome. ``consecutive_failures`` failures in a row (a 5xx answer, a
refused or reset connection, a timeout) eject the server for ``base_ejection_s`` × 2^(ejections so far),
at most ``max_ejection_s``; a success resets the count. An ejected server is not a candidate until its
ejection ends, then it is on probation: one failure ejects it again, for longer, until
``probation_successes`` successes in a row clear its record. No more than
``max_ejected_fraction`` of the pool is ejected at once, so a pool-wide fault degrades to serving errors
rather than to serving nothing. Ejection is relative to the pool: each server's recent failure rate is a
moving average over its outcomes (each weighing ``recent_weight``), and a server is ejected only while its
rate is over ``relative_factor`` times the mean rate of the other servers that had outcomes — when the whole
pool fails alike (a loaded host slowing every server past its timeouts), none is singled out (counted in
``spared``). ``relative_factor`` 0 ejects on consecutive failures alone. Time is passed in.

>>> outliers = Outliers(OutlierPolicy(consecutive_failures=2, base_ejection_s=10.0))
>>> outliers.failed("a", now=0.0, pool_size=4), outliers.failed("a", now=1.0, pool_size=4)
(None, 11.0)
>>> outliers.ejected(now=5.0), outliers.ejected(now=12.0)
({'a': 11.0}, {})
>>> outliers.failed("a", now=12.0, pool_size=4)  # on probation: one failure, twice as long
32.0
>>> pool = Outliers(OutlierPolicy(consecutive_failures=2))
>>> [pool.failed(server, now, pool_size=3) for now in (0.0, 1.0) for server in "abc"]  # all fail alike: none out
[None, None, None, None, None, None]
>>> pool.spared
3
>>> for server in "bc" * 10:
...     pool.succeeded(server)
>>> pool.failed("a", now=2.0, pool_size=3)  # now it fails where the others do not
12.0
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
    relative_factor: float = 2.0
    recent_weight: float = 0.1

    def __post_init__(self) -> None:
        if self.consecutive_failures < 1 or self.base_ejection_s <= 0 or self.max_ejection_s < self.base_ejection_s:
            raise ValueError(f"outlier detection needs at least one failure and positive ejection times, got {self}")
        if not 0.0 <= self.max_ejected_fraction <= 1.0:
            raise ValueError(f"max ejected fraction must be within [0, 1], got {self.max_ejected_fraction}")
        if not self.relative_factor >= 0 or not 0 < self.recent_weight <= 1:
            raise ValueError(f"the relative factor must be 0 or more and the recent weight within (0, 1], got {self}")


@dataclass
class _Health:
    failures: int = 0  # consecutive
    successes: int = 0  # consecutive
    ejections: int = 0  # since its record was last cleared; the next ejection lasts base × 2^ejections
    until: float = 0.0  # ejected until then
    recent: float = 0.0  # moving average of its outcomes: 1 a failure, 0 a success


@dataclass
class Outliers:
    policy: OutlierPolicy = field(default_factory=OutlierPolicy)
    total_ejections: int = 0
    spared: int = 0  # ejections left out because the rest of the pool failed alike
    _servers: dict[str, _Health] = field(default_factory=dict)

    def succeeded(self, server_id: str) -> None:
        health = self._servers.setdefault(server_id, _Health())
        health.recent -= self.policy.recent_weight * health.recent
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
        health.recent += self.policy.recent_weight * (1.0 - health.recent)
        if health.failures < self.policy.consecutive_failures and not health.ejections:  # not on probation
            return None
        if len(self.ejected(now)) + 1 > self.policy.max_ejected_fraction * pool_size:
            return None
        if not self._stands_out(server_id, health):
            self.spared += 1
            return None
        health.until = now + min(self.policy.max_ejection_s, self.policy.base_ejection_s * 2 ** health.ejections)
        health.ejections += 1
        health.failures = 0
        self.total_ejections += 1
        return health.until

    def _stands_out(self, server_id: str, health: _Health) -> bool:
        """Whether the server fails more than ``relative_factor`` times as often as the rest of the pool."""
        if not self.policy.relative_factor:
            return True
        others = [h.recent for sid, h in self._servers.items() if sid != server_id]
        return not others or health.recent > self.policy.relative_factor * sum(others) / len(others)

    def until(self, server_id: str) -> float:
        """When the server's current or last ejection ends (0: never ejected)."""
        health = self._servers.get(server_id)
        return health.until if health is not None else 0.0

    def ejected(self, now: float) -> dict[str, float]:
        """Servers ejected at ``now``, with the end of their ejection."""
        return {sid: h.until for sid, h in self._servers.items() if h.until > now}

    def forget(self, server_id: str) -> None:
        self._servers.pop(server_id, None)
