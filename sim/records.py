"""What a simulated server reports: per-request outcomes and metric snapshots."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from headroom.contract.server_metrics import ServerMetrics
from headroom.sim.request import SimRequest


class Outcome(NamedTuple):
    """How one request went on one server (virtual seconds). Immutable (a named tuple: cheap to make)."""

    request: SimRequest
    server_id: str
    submitted_s: float
    first_token_s: float
    completion_s: float
    output_tokens: int
    cached_prompt_tokens: int  # prefix-cache hit at first admission
    preemptions: int
    token_times: tuple[float, ...] = ()  # every token's time, when the server records them

    @property
    def ttft_ms(self) -> float:
        return (self.first_token_s - self.request.arrival_s) * 1000.0

    @property
    def e2e_ms(self) -> float:
        return (self.completion_s - self.request.arrival_s) * 1000.0

    @property
    def tpot_ms(self) -> float | None:
        """Mean time per output token after the first; None for a single-token output."""
        if self.output_tokens < 2:
            return None
        return (self.completion_s - self.first_token_s) * 1000.0 / (self.output_tokens - 1)


@dataclass(frozen=True, slots=True)
class Dropped:
    """A request the server refused, and why."""

    request: SimRequest
    server_id: str
    time_s: float
    reason: str


class MetricsSnapshot(NamedTuple):
    """One server at one moment: which server, and its ``metrics``, every field of
    :class:`~contract.server_metrics.ServerMetrics` filled with vLLM's and JetStream's semantics at once, as
    the series :mod:`contract.server_metrics` declares them carry (the simulator's ``/metrics`` exposes them,
    :mod:`sim.exposition`). ``ready`` is false while the server loads. Immutable (a named tuple: cheap to
    make, one per scrape)."""

    server_id: str
    server_type: str
    pool_key: str
    time_s: float
    metrics: ServerMetrics
    ready: bool = True
