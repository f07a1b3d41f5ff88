"""A server's capacity on a trace, which offered load is set relative to.

A server's *capacity* is its completion rate when flooded with the trace's requests all at once (its best
sustainable throughput with full batches), measured without prefix caching (hashes stripped) so that the
capacity does not assume a routing policy; a pool of ``n`` servers at utilization ``u`` gets the trace
time-scaled to ``u · n · capacity`` requests/s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from headroom.sim.policies import policy
from headroom.sim.pool import run, uniform_pool
from headroom.sim.profile import ServerProfile
from headroom.sim.request import SimRequest


def capacity_rps(requests: Sequence[SimRequest], server_type: str | ServerProfile = "h100",
                 sample: int | None = None) -> float:
    """One server's completion rate when flooded with (up to ``sample`` of) the trace's requests, no prefix reuse."""
    flood = [replace(r, arrival_s=0.0, prefix_hashes=()) for r in requests[:sample]]
    result = run(flood, uniform_pool(1, server_type), policy("round-robin"))
    return len(result.outcomes) / result.end_s
