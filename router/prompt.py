"""What the router reads from an OpenAI-compatible request body: prompt tokens, output cap, streaming,
and the prompt's chained 16-token block hashes (for the prefix index).

``/v1/completions`` carries ``prompt`` (a string, a list of token ids, or a one-element list of either);
``/v1/chat/completions`` carries ``messages``, read as the text ``<|role|>\\ncontent\\n`` per message.
Token ids are used as given. Text is estimated at one token per 4 UTF-8 bytes (rounded up), so a block of
16 tokens is 64 bytes: the same convention the project's simulator serves by, so the router's estimate
and the server's reported ``usage`` agree there; telemetry records the server's own count. A body may
carry the trace-replay extension ``headroom: {prompt_tokens, hash_ids}``, which then takes precedence.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from router.errors import RequestError
from router.state.prefix_index import BLOCK_TOKENS, block_hashes

BYTES_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class PromptInfo:
    prompt_tokens: int
    max_tokens: int
    stream: bool
    block_hashes: tuple[int, ...]


def text_tokens(text: str) -> int:
    return max(1, -(-len(text.encode("utf-8")) // BYTES_PER_TOKEN))


def text_block_hashes(text: str) -> tuple[int, ...]:
    """Chained 63-bit hashes of the full 16-token (64-byte) blocks of ``text``."""
    raw = text.encode("utf-8")
    size = BLOCK_TOKENS * BYTES_PER_TOKEN
    hashes, previous = [], b""
    for start in range(0, len(raw) - size + 1, size):
        previous = hashlib.blake2b(previous + raw[start:start + size], digest_size=8).digest()
        hashes.append(int.from_bytes(previous, "big") >> 1)
    return tuple(hashes)


def read_body(body: Any, chat: bool) -> PromptInfo:
    """Prompt facts of a decoded JSON request body; raises RequestError when it is malformed."""
    if not isinstance(body, Mapping):
        raise RequestError("request body must be a JSON object")
    tokens, hashes = _chat(body) if chat else _completion(body)
    extension = body.get("headroom") or {}
    if not isinstance(extension, Mapping):
        raise RequestError("'headroom' must be an object")
    if "prompt_tokens" in extension:
        tokens = _count(extension["prompt_tokens"], "headroom.prompt_tokens", minimum=1)
    if "hash_ids" in extension:
        ids = extension["hash_ids"]
        if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
            raise RequestError("'headroom.hash_ids' must be a list of integers")
        hashes = tuple(ids)
    max_tokens = _count(body.get("max_completion_tokens", body.get("max_tokens", 0)) or 0, "max_tokens", minimum=0)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(f"'stream' must be true or false, got {stream!r}")
    return PromptInfo(prompt_tokens=tokens, max_tokens=max_tokens, stream=stream,
                      block_hashes=hashes[:tokens // BLOCK_TOKENS])


def _completion(body: Mapping[str, Any]) -> tuple[int, tuple[int, ...]]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return text_tokens(prompt), text_block_hashes(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return len(prompt), block_hashes(prompt)
    raise RequestError("'prompt' must be a string or a non-empty list of token ids")


def _chat(body: Mapping[str, Any]) -> tuple[int, tuple[int, ...]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list")
    parts = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise RequestError(f"'messages[{i}]' must be an object")
        content = message.get("content", "")
        if isinstance(content, list):  # content parts: the text ones count
            content = "".join(p.get("text", "") for p in content if isinstance(p, Mapping))
        if not isinstance(content, str):
            raise RequestError(f"'messages[{i}].content' must be a string or a list of parts")
        parts.append(f"<|{message.get('role', 'user')}|>\n{content}\n")
    text = "".join(parts)
    return text_tokens(text), text_block_hashes(text)


def _count(value: Any, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RequestError(f"'{name}' must be an integer of at least {minimum}, got {value!r}")
    return value
