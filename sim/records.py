"""What a simulated server reports: per-request outcomes and metric snapshots."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

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
    """One server's metrics at one moment, with vLLM's and JetStream's semantics.

    ``kv_cache_usage`` is ``vllm:kv_cache_usage_perc`` (0-1); the prefix-cache counters count prompt
    tokens, as vLLM's ``prefix_cache_queries`` / ``prefix_cache_hits`` do; ``prefill_backlog`` is
    ``jetstream_prefill_backlog_size`` (requests waiting for prefill) and ``slots_used`` is
    ``jetstream_slots_used_percentage`` (0-1). The metric fields carry the names of
    :class:`contract.server_metrics.ServerMetrics`' fields, which the simulator's ``/metrics`` exposes
    (:mod:`sim.exposition`). Immutable (a named tuple: cheap to make, one per scrape).
    """

    server_id: str
    server_type: str
    pool_key: str
    time_s: float
    num_waiting: int
    num_running: int
    kv_cache_usage: float
    prefix_cache_queries: int
    prefix_cache_hits: int
    prefill_backlog: int
    slots_used: float
    memory_used_bytes: int
    ready: bool = True
