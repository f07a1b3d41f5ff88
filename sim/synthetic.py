"""Synthetic load: arrival processes, heavy-tailed lengths and regime changes, all seeded.

Arrivals: :func:`poisson_arrivals` (optionally with rate steps), :func:`bursty_arrivals` (a two-state
Markov-modulated Poisson process: calm periods at the base rate, bursts at ``burst_factor`` times it).
Lengths: :class:`Lengths` — log-normal (heavy right tail) or Pareto, clipped to ``[low, high]``.
:func:`generate` turns arrival times into requests. Regime changes: a rate step is a ``rate_steps``
entry of :func:`poisson_arrivals`; :func:`shift_prompts` scales prompt lengths from a time on; a server
slowing down is a pool action, :func:`sim.pool.slow_down`.

Named loads (:data:`LOADS`, built by :func:`synthetic_load` from a spec such as ``code:burst_factor=8``):

- ``code`` — bursty code completion: ~2k-token prompts (log-normal, median 1,800), ~13-token outputs
  (median 12), a mean of 3 arrivals/s with rare bursts at ``burst_factor`` × the calm rate lasting ~1 s
  (the default 30 gives 1-s counts up to ~70), short shared prefixes (64 file headers of 64–512 tokens).
  ``burst_factor=1`` is a Poisson load of the same requests.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from headroom.contract.prompt import BLOCK_TOKENS
from headroom.sim.prefixes import SharedPrefixes
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
             id_prefix: str = "syn", **fields: Any) -> list[SimRequest]:
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


def code_completion(count: int, seed: int = 0, burst_factor: float = 30.0, rate: float = 3.0,
                    burst_share: float = 0.02, burst_s: float = 1.0) -> list[SimRequest]:
    """``count`` requests of the bursty code-completion load (see the module docstring), native timing."""
    if count < 1:
        raise ValueError(f"a synthetic load needs at least one request, got {count}")
    duration = 1.5 * count / rate
    while True:
        if burst_factor == 1.0:
            times = poisson_arrivals(rate, duration, seed)
        else:
            times = bursty_arrivals(rate, duration, seed, burst_factor, burst_share, burst_s / burst_share / 2)
        if len(times) >= count:
            break
        duration *= 2
    return generate(times[:count], Lengths(1800, 0.5, low=64, high=8192), Lengths(12, 0.7, low=2, high=512),
                    seed=seed, prefixes=SharedPrefixes(count=64, min_tokens=64, max_tokens=512), id_prefix="code")


LOADS: dict[str, Callable[..., list[SimRequest]]] = {"code": code_completion}


def synthetic_load(spec: str, count: int, seed: int = 0) -> list[SimRequest]:
    """The named load of ``spec`` (``name`` or ``name:key=value,...``), ``count`` requests, native timing.

    A ``seed`` in the spec overrides the argument. Raises ValueError naming what is wrong.
    """
    name, _, rest = spec.partition(":")
    if name not in LOADS:
        raise ValueError(f"unknown synthetic load {name!r}; known: {', '.join(sorted(LOADS))}")
    params: dict[str, float] = {"seed": seed}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        try:
            params[key.strip()] = float(value)
        except ValueError:
            raise ValueError(f"synthetic load {spec!r}: {item!r} is not key=number") from None
    params["seed"] = int(params["seed"])
    try:
        return LOADS[name](count, **params)
    except TypeError as err:
        raise ValueError(f"synthetic load {spec!r}: {err}") from None
