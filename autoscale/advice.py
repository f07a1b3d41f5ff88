"""Why a replay never exercised scaling, and what replay would: too short for an HPA to act, or a load one
server carries (then a speed whose busiest minute needs about half the replicas), or a load too steady."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from headroom.autoscale.closed_loop import LoopSettings
from headroom.sim.capacity import capacity_rps
from headroom.sim.request import SimRequest

MIN_REPLAY_S = 300.0  # a replay shorter than this gives an HPA (15 s syncs, pods loading for tens of seconds)
# too few decisions to tell targets apart


@dataclass(frozen=True)
class ScalingAdvice:
    """Why a replay never exercised scaling, and what replay would."""

    span_s: float  # how long the replay lasts
    peak_rps: float  # its busiest minute's arrival rate
    server_rps: float  # one server's completion rate when flooded with the trace's requests
    speedup: float  # the replay speed asked for
    suggested_speedup: float  # one whose busiest minute needs ``servers_at_peak`` servers
    servers_at_peak: int

    @property
    def message(self) -> str:
        said = "the trace never exercised scaling"
        if self.span_s < MIN_REPLAY_S:
            return (f"{said}: the replay lasts {self.span_s:.0f} s, too short for an HPA that syncs every 15 s "
                    f"and waits for pods to load; replay at least {MIN_REPLAY_S:.0f} s (more requests with "
                    f"--limit, or a lower --speedup)")
        load = f"its busiest minute brings {self.peak_rps:.1f} req/s, {self.peak_rps / self.server_rps:.1f}× what " \
               f"one server completes ({self.server_rps:.1f} req/s)"
        if self.suggested_speedup <= self.speedup:
            return (f"{said}: {load}, steadily enough that the starting pool carries it; pick a burstier slice "
                    f"of the trace")
        return (f"{said}: {load}; replay it with --speedup {self.suggested_speedup:g} (busiest minute ≈ "
                f"{self.servers_at_peak} servers), or pick a busier slice of the trace")


def scaling_advice(requests: Sequence[SimRequest], settings: LoopSettings, speedup: float,
                   max_replicas: int) -> ScalingAdvice:
    """How the replay falls short, with a speed whose busiest minute needs half of ``max_replicas`` (≥ 2)."""
    server_rps = capacity_rps(requests, settings.profile, sample=2000)
    arrivals = [r.arrival_s for r in requests]
    peak, start = 0, 0
    for end, t in enumerate(arrivals):
        while arrivals[start] < t - 60.0:
            start += 1
        peak = max(peak, end - start + 1)
    span = arrivals[-1] - arrivals[0]
    peak_rps = peak / min(60.0, max(span, 1.0))
    servers = max(2, math.ceil(max_replicas / 2))
    suggested = float(f"{speedup * servers * server_rps / max(peak_rps, 1e-9):.2g}")
    return ScalingAdvice(span, peak_rps, server_rps, speedup, suggested, servers)
