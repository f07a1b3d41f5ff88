"""Prompts as headroom counts them: a token estimate for text and chained hashes of 16-token blocks.

Text is one token per 4 UTF-8 bytes (rounded up, at least 1) — a stable estimate, not a tokenizer; token
ids count as given. Block ``i`` covers tokens ``16i .. 16i+15`` (bytes ``64i .. 64i+63`` of text) and its
hash chains the previous block's hash with its content, the way vLLM hashes KV blocks: two prompts share
a cached prefix exactly as far as their leading hashes agree. The router's prefix index, the simulated
servers and the trace-replay extension (``headroom.hash_ids``) all use these, so they agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

BLOCK_TOKENS = 16
BYTES_PER_TOKEN = 4


def count_tokens(text: str) -> int:
    return max(1, -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN))


def text_block_hashes(text: str, max_tokens: int | None = None) -> tuple[int, ...]:
    """Chained hashes of the full 16-token blocks of ``text`` (of its first ``max_tokens`` tokens)."""
    raw = text.encode("utf-8")
    if max_tokens is not None:
        raw = raw[:max_tokens * BYTES_PER_TOKEN]
    size = BLOCK_TOKENS * BYTES_PER_TOKEN
    return _chain([raw[i:i + size] for i in range(0, len(raw) - size + 1, size)])


def token_block_hashes(token_ids: Sequence[int]) -> tuple[int, ...]:
    """Chained hashes of the full 16-token blocks of a pre-tokenized prompt: each block's ids as decimal text
    joined by commas (written for all blocks at once, then cut at every 16th comma)."""
    full = len(token_ids) // BLOCK_TOKENS * BLOCK_TOKENS
    if not full:
        return ()
    text = ",".join(map(str, token_ids[:full])).encode()
    ends = np.flatnonzero(np.frombuffer(text, np.uint8) == ord(","))[BLOCK_TOKENS - 1::BLOCK_TOKENS].tolist()
    return _chain([text[start:end] for start, end in zip([0] + [e + 1 for e in ends], ends + [len(text)])])


def chat_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """The text a chat request's messages stand for: ``<|role|>\\ncontent\\n`` per message, text parts only."""
    parts = []
    for message in messages:
        content = message.get("content", "")
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
        parts.append(f"<|{message.get('role', 'user')}|>\n{content}\n")
    return "".join(parts)


def _chain(blocks: Sequence[bytes]) -> tuple[int, ...]:
    hashes, previous = [], b""
    for block in blocks:
        digest = hashlib.blake2b(previous + block, digest_size=8).digest()
        hashes.append(int.from_bytes(digest, "big") >> 1)
        previous = digest
    return tuple(hashes)
