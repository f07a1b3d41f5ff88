"""Server types: the calibrated iteration-time model and the capacity of one simulated model server.

The step time follows the iteration model of ``traces/README.md`` (Llama-3-8B bf16, one H100, vLLM with
chunked prefill and 16-token blocks)::

    step_ms = a + b·P + c·D + d·C + e·A
      P  non-cached prefill tokens computed in the step
      D  decode sequences in the step
      C  context tokens of those decode sequences
      A  Σ over prefill chunks of t·(s + t/2): t new tokens, s tokens already in the KV cache

``a..d`` are the README's coefficients; ``e`` (1.3e-6) is its attention term, applied to every chunk so
that a fresh 2,048-token prefill lands on its 50 ms anchor. The A100 profile scales ``b`` (and the
attention term, also prefill compute) by 3.3 and ``a``, ``d`` by 1.6, as the README states. KV capacity is
BLIS's measured ``total_kv_blocks`` for Llama-3.1-8B TP1 (29,205 on both GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from headroom.contract.prompt import BLOCK_TOKENS  # KV blocks and prefix-hash blocks are the same 16 tokens

KV_BYTES_PER_TOKEN = 128 * 1024


@dataclass(frozen=True)
class ServerProfile:
    """One server type: its step-time coefficients (ms) and its limits."""

    name: str
    a_ms: float = 6.5
    b_ms_per_prefill_token: float = 0.020
    c_ms_per_decode_seq: float = 0.02
    d_ms_per_context_token: float = 6e-5
    e_ms_attention: float = 1.3e-6
    kv_blocks: int = 29_205
    max_num_seqs: int = 256  # vLLM's default slot limit
    token_budget: int = 2_048  # max tokens per step (chunked prefill)
    load_delay_s: float = 45.0  # from "added" to "serving": container start plus weight load
    weights_bytes: int = 16_060_000_000  # 8B parameters in bf16
    noise: float = 0.0  # sigma of the multiplicative log-normal step-time noise (0: deterministic)

    def __post_init__(self) -> None:
        if self.kv_blocks < 1 or self.max_num_seqs < 1 or self.token_budget < 1:
            raise ValueError(f"profile {self.name!r}: kv_blocks, max_num_seqs and token_budget must be positive")
        if self.token_budget < self.max_num_seqs:
            raise ValueError(f"profile {self.name!r}: token_budget {self.token_budget} is below max_num_seqs "
                             f"{self.max_num_seqs}, so a full batch of decodes would not fit in one step")
        if self.noise < 0:
            raise ValueError(f"profile {self.name!r}: noise must not be negative, got {self.noise}")

    def step_ms(self, prefill: int, decodes: int, context: int, attention: float) -> float:
        """Noise-free duration of one step (see the module docstring for the terms)."""
        return (self.a_ms + self.b_ms_per_prefill_token * prefill + self.c_ms_per_decode_seq * decodes
                + self.d_ms_per_context_token * context + self.e_ms_attention * attention)

    @property
    def memory_used_bytes(self) -> int:
        """Accelerator memory in use: weights plus the whole preallocated KV cache, constant while serving."""
        return self.weights_bytes + self.kv_blocks * BLOCK_TOKENS * KV_BYTES_PER_TOKEN

    def with_(self, **changes: Any) -> ServerProfile:  # each checked by replace() when called
        return replace(self, **changes)


H100 = ServerProfile("h100")
A100 = ServerProfile("a100", a_ms=6.5 * 1.6, b_ms_per_prefill_token=0.020 * 3.3, d_ms_per_context_token=6e-5 * 1.6,
                     e_ms_attention=1.3e-6 * 3.3)

PROFILES: dict[str, ServerProfile] = {p.name: p for p in (H100, A100)}


def profile(name: str) -> ServerProfile:
    """The built-in profile called ``name``."""
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown server type {name!r}; known: {', '.join(sorted(PROFILES))}") from None
