"""Synthetic load: arrival processes, heavy-tailed lengths and regime changes, all seeded.

Arrivals: :func:`poisson_arrivals` (optionally with rate steps), :func:`bursty_arrivals` (a two-state
Markov-modulated Poisson process: calm periods at the base rate, bursts at ``burst_factor`` times it).
Lengths: :class:`Lengths` — log-normal (heavy right tail) or Pareto, clipped to ``[low, high]``.
:func:`generate` turns arrival times into requests. Regime changes: a rate step is a ``rate_steps``
entry of :func:`poisson_arrivals`; :func:`shift_prompts` scales prompt lengths from a time on; a server
slowing down is a pool action, :func:`sim.pool.slow_down`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from headroom.sim.prefixes import SharedPrefixes
from headroom.sim.profile import BLOCK_TOKENS
from headroom.sim.request import SimRequest


@dataclass(frozen=True)
class Lengths:
    """A token-length distribution: ``lognormal`` (median, sigma) or ``pareto`` (scale=median, alpha=sigma)."""

    median: float
    sigma: float = 1.0
    kind: str = "lognormal"
    low: int = 1
    high: int = 32_768

    def __post_init__(self) -> None:
        if self.kind not in ("lognormal", "pareto"):
            raise ValueError(f"Lengths.kind must be 'lognormal' or 'pareto', got {self.kind!r}")
        if self.median <= 0 or self.sigma <= 0 or not 1 <= self.low <= self.high:
            raise ValueError(f"Lengths needs median > 0, sigma > 0 and 1 <= low <= high, got {self}")

    def draw(self, rng: random.Random) -> int:
        if self.kind == "lognormal":
            value = rng.lognormvariate(math.log(self.median), self.sigma)
        else:
            value = self.median * rng.paretovariate(self.sigma)
        return max(self.low, min(self.high, int(value)))


def poisson_arrivals(rate: float, duration_s: float, seed: int = 0,
                     rate_steps: Sequence[tuple[float, float]] = ()) -> list[float]:
    """Poisson arrival times over ``[0, duration_s)``; ``rate_steps`` = ``[(from_s, new_rate), …]``."""
    rng = random.Random(seed)
    steps = sorted(rate_steps)
    times, t, current = [], 0.0, rate
    boundaries = [s for s, _ in steps] + [duration_s]
    rates = [rate] + [r for _, r in steps]
    segment_start = 0.0
    for end, current in zip(boundaries, rates):
        if current < 0:
            raise ValueError(f"arrival rate must not be negative, got {current}")
        t = segment_start
        while current > 0:
            t += rng.expovariate(current)
            if t >= end:
                break
            times.append(t)
        segment_start = end
    return times


def bursty_arrivals(rate: float, duration_s: float, seed: int = 0, burst_factor: float = 4.0,
                    burst_share: float = 0.2, mean_period_s: float = 10.0) -> list[float]:
    """Markov-modulated Poisson arrivals whose long-run mean rate is ``rate``.

    The process spends ``burst_share`` of the time in bursts at ``burst_factor`` × the calm rate;
    periods last exponentially distributed times with mean ``mean_period_s`` (scaled by the share).
    """
    if not 0 < burst_share < 1 or burst_factor < 1:
        raise ValueError("bursty_arrivals needs 0 < burst_share < 1 and burst_factor >= 1")
    rng = random.Random(seed)
    calm = rate / (1 - burst_share + burst_share * burst_factor)
    times, t, bursting = [], 0.0, False
    while t < duration_s:
        mean = mean_period_s * (burst_share if bursting else 1 - burst_share) * 2
        end = min(duration_s, t + rng.expovariate(1.0 / mean))
        current = calm * (burst_factor if bursting else 1.0)
        while True:
            t += rng.expovariate(current)
            if t >= end:
                break
            times.append(t)
        t, bursting = end, not bursting
    return times


def generate(arrivals: Sequence[float], prompts: Lengths = Lengths(1024, 0.8), outputs: Lengths = Lengths(128, 1.0),
             *, seed: int = 0, prefixes: SharedPrefixes | None = SharedPrefixes(), stream_fraction: float = 1.0,
             id_prefix: str = "syn", **fields: object) -> list[SimRequest]:
    """One request per arrival time, with drawn lengths, shared prefixes and stream flags."""
    rng = random.Random(seed)
    sampler = prefixes.sampler(seed + 1) if prefixes else None
    requests = []
    for i, t in enumerate(sorted(arrivals)):
        prompt = prompts.draw(rng)
        requests.append(SimRequest(f"{id_prefix}-{i}", t, prompt, outputs.draw(rng),
                                prefix_hashes=sampler.hashes(prompt) if sampler else (),
                                stream=rng.random() < stream_fraction, **fields))
    return requests


def shift_prompts(requests: Sequence[SimRequest], from_s: float, factor: float) -> list[SimRequest]:
    """Prompt lengths multiplied by ``factor`` for requests arriving at or after ``from_s`` (a regime change)."""
    if factor <= 0:
        raise ValueError(f"prompt shift factor must be positive, got {factor}")
    shifted = []
    for r in requests:
        if r.arrival_s >= from_s:
            prompt = max(1, int(r.prompt_tokens * factor))
            r = replace(r, prompt_tokens=prompt, prefix_hashes=r.prefix_hashes[:prompt // BLOCK_TOKENS])
        shifted.append(r)
    return shifted


def scale_rate(requests: Sequence[SimRequest], factor: float, from_s: float = 0.0) -> list[SimRequest]:
    """Arrivals after ``from_s`` compressed ``factor`` times (a rate step on an existing trace)."""
    if factor <= 0:
        raise ValueError(f"rate factor must be positive, got {factor}")
    return [r if r.arrival_s <= from_s else replace(r, arrival_s=from_s + (r.arrival_s - from_s) / factor)
            for r in requests]
