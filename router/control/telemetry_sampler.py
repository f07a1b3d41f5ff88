"""Stratified sampling of telemetry at the router: a pool larger than one worker stays one worker's pool.

The worker keeps each stratum (:mod:`contract.strata`) as a window of at most ``HEADROOM_WINDOW_MAX_ROWS``
rows, trained every ``HEADROOM_RETRAIN_INTERVAL`` seconds; a stratum that receives far more records than
that is mostly read and then evicted unseen. So the router, which knows a request's stratum at dispatch,
sends each stratum's records at up to ``quota_per_s``: it estimates the stratum's rate (records per second,
decaying over ``horizon_s``) and keeps a record with probability ``p = max(floor, min(1, quota / rate))``.
Strata below the quota — the rare ones — are sent whole; busy ones are thinned uniformly, so their
windows still hold their newest rows, a little older. Each record sent carries ``sample_weight = 1/p``,
the requests it stands for, so nothing goes unaccounted. ``floor`` bounds the weights (and keeps a thin
uniform stream of every stratum).

Pure: :meth:`TelemetrySampler.weight` takes the time and draws from the given random generator.

>>> import random
>>> sampler = TelemetrySampler(quota_per_s=10.0, rng=random.Random(1))
>>> kept = [w for t in range(10_000) if (w := sampler.weight("q0/kv10/pm0", t / 100.0)) is not None]
>>> len(kept), round(sum(kept), -2), round(max(kept))  # 100/s for 100 s, sent at about 10/s (all at first)
(1359, 10300.0, 10)
>>> sampler.weight("q11+/kv95/pm3", 100.0)  # a rare stratum: every record, weight 1
1.0
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field


@dataclass
class _Rate:
    mass: float = 0.0  # records, decayed with time constant horizon_s
    at: float = 0.0


@dataclass
class TelemetrySampler:
    quota_per_s: float  # records per second sent per stratum, at most about
    floor: float = 0.01  # smallest probability of sending a record (largest weight: 1/floor)
    horizon_s: float = 10.0  # time constant of the rate estimate
    rng: random.Random = field(default_factory=random.Random)
    _rates: dict[str, _Rate] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.quota_per_s <= 0 or not 0 < self.floor <= 1 or self.horizon_s <= 0:
            raise ValueError(f"telemetry sampling needs a positive quota, a floor within (0, 1] and a positive "
                             f"horizon; got {self.quota_per_s}, {self.floor}, {self.horizon_s}")

    def weight(self, stratum: str, now: float) -> float | None:
        """The weight of a record of ``stratum`` completed at ``now`` (seconds), or None: not sent."""
        rate = self._rates.get(stratum)
        if rate is None:
            rate = self._rates[stratum] = _Rate(at=now)
        rate.mass = rate.mass * math.exp(-max(0.0, now - rate.at) / self.horizon_s) + 1.0
        rate.at = max(rate.at, now)
        probability = max(self.floor, min(1.0, self.quota_per_s * self.horizon_s / rate.mass))
        if probability < 1.0 and self.rng.random() >= probability:
            return None
        return 1.0 / probability
