"""The simulated request: what a load generator sends and what a pick function routes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SimRequest:
    """One request of a trace or generator.

    ``prefix_hashes`` are chained hashes of the prompt's full 16-token blocks that other requests may
    share (block ``i`` covers tokens ``16i .. 16i+15``); two requests share a cached prefix exactly as far
    as their leading hashes agree. Blocks past the end of the tuple are private to the request.
    ``output_tokens`` is how many tokens the server generates (the trace's length); ``max_tokens`` is the
    cap the client asked for (0: not stated).
    """

    request_id: str
    arrival_s: float  # virtual seconds from the start of the run
    prompt_tokens: int
    output_tokens: int
    max_tokens: int = 0
    prefix_hashes: tuple[int, ...] = ()
    stream: bool = True
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    priority: int = 0
    pool_key: str = "default"

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError(f"request {self.request_id!r} needs at least one prompt and one output token, "
                             f"got {self.prompt_tokens} and {self.output_tokens}")
        if len(self.prefix_hashes) > self.prompt_tokens // 16:
            raise ValueError(f"request {self.request_id!r} has {len(self.prefix_hashes)} prefix hashes but only "
                             f"{self.prompt_tokens // 16} full 16-token blocks")
