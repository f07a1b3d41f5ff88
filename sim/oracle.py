"""The oracle: the TTFT a request would really get on each server, found by simulating forward.

For each candidate, the server's state is forked (:meth:`~sim.engine.ServerEngine.fork`), the request
is submitted to the fork and the fork runs until the request's first token. Exact for the server's
current state, its own queue and its step-time noise, under one assumption: **no other request
arrives meanwhile** (later arrivals can only delay the request further, so the oracle is a lower
bound of the TTFT it will get). Cost: one fork (a copy of the server's cache index and sequences)
plus the forward steps, about 0.2 ms per server on the Azure trace at 80% load — an oracle router
over 16 servers makes ~300 decisions per CPU second, fine for benchmarks, not for serving.
"""

from __future__ import annotations

from headroom.sim.engine import ServerEngine
from headroom.sim.request import SimRequest
from headroom.sim.view import PoolView

MAX_FORWARD_WAKES = 1_000_000


def true_ttft_ms(engine: ServerEngine, request: SimRequest, now: float) -> float:
    """The TTFT (ms, from the request's arrival) ``request`` would get if sent to ``engine`` at ``now``."""
    fork = engine.fork()
    fork.record_tokens = False
    if not fork.submit(request, now):
        return float("inf")
    seq = fork.newest_submitted()
    for _ in range(MAX_FORWARD_WAKES):
        if seq.first_token_s is not None:
            return (seq.first_token_s - request.arrival_s) * 1000.0
        wake = fork.next_wake(fork.clock)
        if wake is None:
            break
        fork.advance_to(max(wake, fork.clock + 1e-12))
    raise RuntimeError(f"oracle: request {request.request_id!r} got no first token on {engine.server_id}")


def oracle_ttfts(view: PoolView, request: SimRequest) -> list[float]:
    """True TTFT (ms) of ``request`` on every server of a :class:`~sim.view.PoolView`, in view order."""
    return [true_ttft_ms(engine, request, view.now) for engine in view.engines()]


def oracle_pick(request: SimRequest, view: PoolView) -> str:
    """A pick function that sends each request where its true TTFT is lowest (the benchmark's ceiling)."""
    ttfts = oracle_ttfts(view, request)
    best = min(range(len(ttfts)), key=lambda i: (ttfts[i], view.inflight_requests[i]))
    return view.snapshots[best].server_id
