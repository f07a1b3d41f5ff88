"""Baseline pick functions: the policies predicted-latency routing is compared against.

Each is ``pick(request, view) -> server_id`` (see :mod:`sim.view`). Ties break towards the server with
the fewest in-flight requests from this router, then the lowest index, so herds do not form between
scrapes. Factories take a seed where the policy is random, so runs repeat.

- ``round-robin`` — servers in turn.
- ``random`` — uniformly at random.
- ``least-queue`` — fewest waiting requests (scraped), then fewest in flight.
- ``prefix-least-queue`` — least-queue made prefix-aware: among the servers within ``queue_slack`` waiting
  requests of the shortest queue, the one holding most of the prompt's prefix, then fewest in flight.
- ``least-kv`` — lowest KV-cache usage (scraped), then fewest in flight.
- ``composite`` — the reference's fallback scorer: (1 − KV usage) + (1 − relative queue) + prefix match,
  weights 1/1/1, where relative queue is the waiting count scaled to 0-1 across the candidates; highest
  score wins.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from headroom.sim.request import SimRequest
from headroom.sim.view import PickFunction, PoolView


def round_robin(seed: int = 0) -> PickFunction:
    state = {"next": seed}

    def pick(request: SimRequest, view: PoolView) -> str:
        i = state["next"] % len(view.snapshots)
        state["next"] = i + 1
        return view.snapshots[i].server_id

    return pick


def random_choice(seed: int = 0) -> PickFunction:
    rng = random.Random(seed)

    def pick(request: SimRequest, view: PoolView) -> str:
        return view.snapshots[rng.randrange(len(view.snapshots))].server_id

    return pick


def least_queue(seed: int = 0) -> PickFunction:
    def pick(request: SimRequest, view: PoolView) -> str:
        return _argmin(view, [s.metrics.num_waiting for s in view.snapshots])

    return pick


def prefix_least_queue(seed: int = 0, queue_slack: int = 1) -> PickFunction:
    def pick(request: SimRequest, view: PoolView) -> str:
        snaps, inflight = view.snapshots, view.inflight_requests
        shortest = min(s.metrics.num_waiting for s in snaps)
        best, best_key = 0, None
        for i, s in enumerate(snaps):
            if s.metrics.num_waiting > shortest + queue_slack:
                continue
            key = (-view.prefix_match(i) if request.prefix_hashes else 0.0, inflight[i], s.metrics.num_waiting)
            if best_key is None or key < best_key:
                best, best_key = i, key
        return snaps[best].server_id

    return pick


def least_kv(seed: int = 0) -> PickFunction:
    def pick(request: SimRequest, view: PoolView) -> str:
        return _argmin(view, [s.metrics.kv_cache_usage for s in view.snapshots])

    return pick


def _argmin(view: PoolView, values: Sequence[float]) -> str:
    """The server with the lowest value, then the fewest in-flight requests, then the lowest index."""
    low = min(values)
    inflight = view.inflight_requests
    best, fewest = -1, 0
    for i, value in enumerate(values):
        if value == low and (best < 0 or inflight[i] < fewest):
            best, fewest = i, inflight[i]
    return view.snapshots[best].server_id


def composite(seed: int = 0, kv_weight: float = 1.0, queue_weight: float = 1.0,
              prefix_weight: float = 1.0) -> PickFunction:
    def pick(request: SimRequest, view: PoolView) -> str:
        snaps, inflight = view.snapshots, view.inflight_requests
        queues = [s.metrics.num_waiting for s in snaps]
        low, high = min(queues), max(queues)
        spread = (high - low) or 1
        best, best_key = 0, None
        for i, s in enumerate(snaps):
            score = kv_weight * (1.0 - s.metrics.kv_cache_usage) + queue_weight * (1.0 - (queues[i] - low) / spread)
            if prefix_weight and request.prefix_hashes:
                score += prefix_weight * view.prefix_match(i)
            key = (-score, inflight[i])
            if best_key is None or key < best_key:
                best, best_key = i, key
        return snaps[best].server_id

    return pick


POLICIES: dict[str, Callable[..., PickFunction]] = {
    "round-robin": round_robin,
    "random": random_choice,
    "least-queue": least_queue,
    "prefix-least-queue": prefix_least_queue,
    "least-kv": least_kv,
    "composite": composite,
}


def policy(name: str, seed: int = 0) -> PickFunction:
    """A fresh pick function of the baseline called ``name``."""
    try:
        return POLICIES[name](seed)
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}") from None
