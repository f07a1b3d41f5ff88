"""Regime changes that routing is judged and tuned with, declared once as data.

Two players read a :class:`Scenario`: the offline simulator (:mod:`sim.scenario_play`, for
``benchmarks/regime_quality.py``) and real processes (``benchmarks/regime_live.py``). A scenario states its
pool (server ids and types), its trace, its load as a share of the pool's capacity
(:meth:`Scenario.capacity`, from :func:`sim.capacity.capacity_rps`), how long it runs, when the change comes and
what it is:

- :class:`Slowdown` — these servers' steps become ``factor`` times slower;
- :class:`KvShrink` — one server keeps ``share`` of its KV blocks (:meth:`sim.engine.ServerEngine.set_kv_capacity`);
- :class:`PromptShift` — from the change on, every prompt is ``factor`` times longer, and the arrival rate falls
  so that the load stays the same share of the pool's (lower) capacity on the longer prompts;
- :class:`Replace` — a fresh server joins the pool (routable at once) and another leaves it (it drains);
- :class:`Burst` — for ``seconds`` the arrival rate is ``load`` times the pool's capacity, then as before;
- None — no change (the steady regime the offline player trains on).

Speed: both players run every server ``time_scale`` times as fast as the profile's hardware (:data:`TIME_SCALE`:
slower, so that a live pool on a small machine is driven at a rate its processes can relay), so a scenario's
seconds are wall seconds live and virtual seconds offline, and its SLOs are the full-speed SLOs divided by the
time scale. Every request streams and carries the SLO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from headroom.sim.capacity import capacity_rps
from headroom.sim.profile import ServerProfile, profile
from headroom.sim.request import SimRequest
from headroom.sim.traces import load_trace

TIME_SCALE = 0.1  # the servers run at a tenth of an H100's (or A100's) speed in both players
LOAD = 0.7  # of the pool's capacity: inside the 60-90% users run at, with room for the changes to bite
CAPACITY_SAMPLE = 2000  # requests of the trace flooded onto one server to measure its capacity
TRACE_START = 100  # the Azure trace opens with a quiet spell; scenarios start past it
TRACE_ROWS = 4000  # rows read past the start (the time scaling is over them all, the same for every change)


@dataclass(frozen=True)
class Slowdown:
    servers: tuple[str, ...]
    factor: float = 2.0

    def describe(self) -> str:
        return f"{', '.join(self.servers)} slow down {self.factor:g}×"


@dataclass(frozen=True)
class KvShrink:
    server: str
    share: float = 0.25

    def blocks(self, server_profile: ServerProfile) -> int:
        """The KV blocks the server keeps."""
        return max(1, int(server_profile.kv_blocks * self.share))

    def describe(self) -> str:
        return f"{self.server}'s KV cache shrinks to {self.share:g} of its blocks"


@dataclass(frozen=True)
class PromptShift:
    factor: float = 3.0

    def describe(self) -> str:
        return f"every prompt becomes {self.factor:g}× longer"


@dataclass(frozen=True)
class Replace:
    remove: str
    add: str  # the new server's id; its type is the part before the last '-'

    def describe(self) -> str:
        return f"{self.add} joins the pool and {self.remove} leaves it (draining)"


@dataclass(frozen=True)
class Burst:
    seconds: float = 20.0
    load: float = 1.5  # of the pool's capacity

    def describe(self) -> str:
        return f"a {self.seconds:g} s burst at {self.load:g}× the pool's capacity"


Change = Slowdown | KvShrink | PromptShift | Replace | Burst


def _servers_named(change: Change | None) -> tuple[str, ...]:
    """The pool's servers a change names."""
    if isinstance(change, Slowdown):
        return change.servers
    if isinstance(change, KvShrink):
        return (change.server,)
    if isinstance(change, Replace):
        return (change.remove,)
    return ()


def server_type(server_id: str) -> str:
    """A scenario server's type: its id up to the last '-' (``h100-2`` → ``h100``)."""
    return server_id.rpartition("-")[0]


@dataclass(frozen=True)
class Scenario:
    name: str
    change: Change | None
    pool: tuple[str, ...] = ("h100-0", "h100-1", "h100-2", "a100-0")
    load: float = LOAD
    duration_s: float = 120.0
    change_at_s: float = 60.0
    trace: str = "azure"
    time_scale: float = TIME_SCALE
    slo_ttft_ms: float = 400.0  # at full speed (time scale 1): met by ~99% of requests before a change
    slo_tpot_ms: float = 40.0

    def __post_init__(self) -> None:
        if not 0 < self.change_at_s < self.duration_s or self.load <= 0 or self.time_scale <= 0:
            raise ValueError(f"scenario {self.name!r}: needs 0 < change_at_s < duration_s, a positive load and "
                             f"time scale")
        known = set(self.pool)
        named = _servers_named(self.change)
        if not set(named) <= known:
            raise ValueError(f"scenario {self.name!r} changes {sorted(set(named) - known)}, not in its pool")

    def describe(self) -> str:
        change = self.change.describe() if self.change is not None else "nothing changes"
        after = self.rate_after() / self.capacity(after=True)
        return (f"{self.name}: {len(self.pool)} servers ({', '.join(self.pool)}) at {self.load:.0%} of capacity; "
                f"at {self.change_at_s:g} s of {self.duration_s:g} s, {change} (then at {after:.0%} of the capacity "
                f"left)")

    def with_(self, **changes: Any) -> Scenario:  # each checked by replace() when called
        return replace(self, **changes)

    @property
    def servers(self) -> tuple[str, ...]:
        """Every server the scenario uses: the pool and any that joins it."""
        return self.pool + ((self.change.add,) if isinstance(self.change, Replace) else ())

    @property
    def slo(self) -> tuple[float, float]:
        """TTFT and TPOT SLO (ms) at the scenario's time scale."""
        return self.slo_ttft_ms / self.time_scale, self.slo_tpot_ms / self.time_scale

    def capacity(self, after: bool = False) -> float:
        """The pool's capacity (requests/s at the scenario's time scale) before the change, or after it."""
        change, factor = self.change if after else None, 1.0
        servers = [(sid, 1.0, 1.0) for sid in self.pool]  # id, slowdown, share of KV blocks
        if isinstance(change, Slowdown):
            servers = [(sid, change.factor if sid in change.servers else 1.0, 1.0) for sid in self.pool]
        elif isinstance(change, KvShrink):
            servers = [(sid, 1.0, change.share if sid == change.server else 1.0) for sid in self.pool]
        elif isinstance(change, Replace):
            servers = [(sid, 1.0, 1.0) for sid in self.pool if sid != change.remove] + [(change.add, 1.0, 1.0)]
        elif isinstance(change, PromptShift):
            factor = change.factor
        return self.time_scale * sum(server_capacity(self.trace, server_type(sid), factor, share) / slow
                                     for sid, slow, share in servers)

    def rate_after(self) -> float:
        """The arrival rate (requests/s) after the change; a burst's once it is over."""
        if isinstance(self.change, PromptShift):
            return self.load * self.capacity(after=True)
        return self.load * self.capacity()

    def rate_segments(self) -> list[tuple[float, float]]:
        """(start s, requests/s) of each stretch of constant arrival rate."""
        before = self.load * self.capacity()
        if isinstance(self.change, Burst):
            end = min(self.change_at_s + self.change.seconds, self.duration_s)
            return [(0.0, before), (self.change_at_s, self.change.load * self.capacity()), (end, before)]
        if isinstance(self.change, PromptShift):
            return [(0.0, before), (self.change_at_s, self.rate_after())]
        return [(0.0, before)]

    def requests(self, seed: int = 0, skip: int = 0) -> list[SimRequest]:
        """The scenario's arrivals (seconds from its start), drawn from the trace after its first
        ``TRACE_START + skip`` requests: the trace's own gaps stretched to the rate of each segment, prompts
        lengthened after a :class:`PromptShift`."""
        skip += TRACE_START
        loaded = load_trace(self.trace, rate=1.0, seed=seed, limit=skip + TRACE_ROWS)[skip:]
        start = loaded[0].arrival_s if loaded else 0.0
        times = warp([r.arrival_s - start for r in loaded], self.rate_segments())
        if not times or times[-1] < self.duration_s:
            raise ValueError(f"scenario {self.name!r}: the {len(loaded)} requests of the trace past row {skip} "
                             f"end before its {self.duration_s:g} s")
        out: list[SimRequest] = []
        for request, t in zip(loaded, times):
            if t >= self.duration_s:
                break
            request = replace(request, arrival_s=t, request_id=f"{self.name}-{seed}-{len(out)}", stream=True,
                              slo_ttft_ms=self.slo[0], slo_tpot_ms=self.slo[1])
            if isinstance(self.change, PromptShift) and t >= self.change_at_s:
                request = replace(request, prompt_tokens=math.ceil(request.prompt_tokens * self.change.factor))
            out.append(request)
        return out


def warp(units: list[float], segments: list[tuple[float, float]]) -> list[float]:
    """Arrival times (sorted, in units of a mean gap of one second) laid onto piecewise constant rates:
    ``segments`` are (start s, requests/s), the first starting at 0."""
    out, i = [], 0
    done = 0.0  # units covered by the segments before segment i
    for u in units:
        while i + 1 < len(segments) and u >= done + (segments[i + 1][0] - segments[i][0]) * segments[i][1]:
            done += (segments[i + 1][0] - segments[i][0]) * segments[i][1]
            i += 1
        start, rate = segments[i]
        out.append(start + (u - done) / rate)
    return out


def scaled(server_profile: ServerProfile, time_scale: float) -> ServerProfile:
    """``server_profile`` run ``time_scale`` times as fast (every step-time term divided by it)."""
    p = server_profile
    return p.with_(a_ms=p.a_ms / time_scale, b_ms_per_prefill_token=p.b_ms_per_prefill_token / time_scale,
                   c_ms_per_decode_seq=p.c_ms_per_decode_seq / time_scale,
                   d_ms_per_context_token=p.d_ms_per_context_token / time_scale,
                   e_ms_attention=p.e_ms_attention / time_scale)


@cache
def server_capacity(trace: str, kind: str, prompt_factor: float = 1.0, kv_share: float = 1.0) -> float:
    """Requests/s one server of type ``kind`` completes at full speed when flooded with the trace's requests
    (:func:`sim.capacity.capacity_rps`), their prompts ``prompt_factor`` times longer, with ``kv_share`` of its KV
    blocks."""
    requests = load_trace(trace, limit=CAPACITY_SAMPLE)
    if prompt_factor != 1.0:
        requests = [replace(r, prompt_tokens=math.ceil(r.prompt_tokens * prompt_factor)) for r in requests]
    server = profile(kind)
    if kv_share != 1.0:
        server = server.with_(kv_blocks=KvShrink("", kv_share).blocks(server))
    return capacity_rps(requests, server)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("slowdown", Slowdown(("h100-0", "h100-1")), load=0.6),  # 84% of the capacity left
    Scenario("kv-shrink", KvShrink("h100-0")),
    Scenario("long-prompts", PromptShift()),
    Scenario("replace", Replace(remove="h100-0", add="h100-3")),
    Scenario("burst", Burst()),
)}


def scenario(name: str) -> Scenario:
    """The declared scenario called ``name``."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


def profile_of(server_id: str, time_scale: float) -> ServerProfile:
    """The profile a scenario server runs with in the offline player (its type's, at the time scale)."""
    return scaled(profile(server_type(server_id)), time_scale)
