"""Synthetic shared prefixes for traces that have none (the Azure traces).

Stated model: the service has ``count`` system prompts; system prompt ``k`` is
``min_tokens + (max_tokens - min_tokens) * u_k`` tokens long (``u_k`` uniform, rounded down to whole
16-token blocks) and is chosen with Zipf(``skew``) popularity. A request starts with the full blocks of
its system prompt that fit strictly inside its prompt; the rest of the prompt is private. Block ``j`` of
system prompt ``k`` has hash ``base + k * 65536 + j``, which is chained by construction (equal hashes
mean equal prefixes). Everything is drawn from the seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from headroom.contract.prompt import BLOCK_TOKENS


@dataclass(frozen=True)
class SharedPrefixes:
    count: int = 32
    min_tokens: int = 128
    max_tokens: int = 1024
    skew: float = 1.0
    base: int = 1 << 40

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 < self.min_tokens <= self.max_tokens:
            raise ValueError(f"SharedPrefixes needs count >= 1 and 0 < min_tokens <= max_tokens, got {self}")

    def sampler(self, seed: int) -> PrefixSampler:
        return PrefixSampler(self, seed)


class PrefixSampler:
    """Draws the shared prefix hashes of successive requests, reproducibly."""

    def __init__(self, spec: SharedPrefixes, seed: int):
        self._rng = random.Random(seed)
        span = spec.max_tokens - spec.min_tokens
        self._blocks = [(spec.min_tokens + int(span * self._rng.random())) // BLOCK_TOKENS for _ in range(spec.count)]
        weights = [1.0 / (k + 1) ** spec.skew for k in range(spec.count)]
        self._cumulative = []
        total = 0.0
        for w in weights:
            total += w
            self._cumulative.append(total)
        self._base = spec.base

    def hashes(self, prompt_tokens: int) -> tuple[int, ...]:
        k = self._rng.choices(range(len(self._blocks)), cum_weights=self._cumulative)[0]
        blocks = min(self._blocks[k], (prompt_tokens - 1) // BLOCK_TOKENS)
        start = self._base + k * 65536
        return tuple(range(start, start + blocks))
