"""What the router reads from an OpenAI-compatible request body: prompt tokens, output cap, streaming,
the prompt's chained 16-token block hashes (for the prefix index) and its media items (for the encoder index).

``/v1/completions`` carries ``prompt`` (a string, a list of token ids, or a one-element list of either);
``/v1/chat/completions`` carries ``messages``, read as the text ``<|role|>\\ncontent\\n`` per message.
Every content part that is not text (``image_url``, ``input_audio``, ``video_url``, ...) is a media item the
server's multimodal encoder processes; identical parts count once, and a request's ``encoder_input_size``
is how many distinct ones it carries.
Tokens and block hashes are counted by :mod:`contract.prompt`, the convention the project's simulator
serves by, so the router's estimate and the server's reported ``usage`` agree there; telemetry records the
server's own count. A body may
carry the trace-replay extension ``headroom: {prompt_tokens, hash_ids}``, which then takes precedence.
The whole body is checked here, before the request is scheduled (``stream_options`` included), within the
:class:`~router.control.limits.RequestLimits`: only the first ``max_hashed_tokens`` tokens are hashed. A body larger
than :data:`OFF_LOOP_BYTES` is read on a worker thread (:func:`parse_body_off_loop`), so that no single
request holds an event loop for the whole of its parsing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from headroom.contract.prompt import (
    BLOCK_TOKENS,
    chat_text,
    count_tokens,
    text_block_hashes,
    token_block_hashes,
)
from headroom.contract.server_state import MAX_COUNT
from headroom.router.control.limits import RequestLimits
from headroom.router.errors import RequestError


@dataclass(frozen=True, slots=True)
class PromptInfo:
    prompt_tokens: int
    max_tokens: int
    stream: bool
    block_hashes: tuple[int, ...]
    media_hashes: tuple[int, ...] = ()  # the distinct media items, hashed

    @property
    def encoder_input_size(self) -> int:
        return len(self.media_hashes)


OFF_LOOP_BYTES = 64 * 1024  # a larger body is parsed on a worker thread (parse_body_off_loop)


def parse_body(raw: bytes, chat: bool, limits: RequestLimits) -> tuple[Any, PromptInfo]:
    """The JSON document of a raw request body (:meth:`RequestLimits.parse_json`) and its prompt facts."""
    doc = limits.parse_json(raw)
    return doc, read_body(doc, chat, limits)


async def parse_body_off_loop(raw: bytes, chat: bool, limits: RequestLimits) -> tuple[Any, PromptInfo]:
    """:func:`parse_body`, on a worker thread when the body is over :data:`OFF_LOOP_BYTES`: the event loop
    serves other requests meanwhile instead of waiting for the largest body the limits let through."""
    if len(raw) <= OFF_LOOP_BYTES:
        return parse_body(raw, chat, limits)
    return await asyncio.to_thread(parse_body, raw, chat, limits)


def read_body(body: Any, chat: bool, limits: RequestLimits = RequestLimits()) -> PromptInfo:
    """Prompt facts of a decoded JSON request body; raises RequestError when it is malformed."""
    if not isinstance(body, Mapping):
        raise RequestError("request body must be a JSON object")
    hashed = limits.max_hashed_tokens
    tokens, hashes = _chat(body, hashed) if chat else _completion(body, hashed)
    media = media_hashes(body["messages"]) if chat else ()
    extension = body.get("headroom") or {}
    if not isinstance(extension, Mapping):
        raise RequestError("'headroom' must be an object")
    if "prompt_tokens" in extension:
        tokens = _count(extension["prompt_tokens"], "headroom.prompt_tokens", minimum=1)
    if "hash_ids" in extension:
        ids = extension["hash_ids"]
        if not isinstance(ids, list):
            raise RequestError("'headroom.hash_ids' must be a list of integers")
        limits.check_block_hashes(len(ids), "'headroom.hash_ids'")
        if not all(type(h) is int and 0 <= h < 2**64 for h in ids):
            raise RequestError("'headroom.hash_ids' must be a list of integers within [0, 2^64)")
        hashes = tuple(ids)
    max_tokens = _count(body.get("max_completion_tokens", body.get("max_tokens", 0)) or 0, "max_tokens", minimum=0)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(f"'stream' must be true or false, got {stream!r}")
    _stream_options(body.get("stream_options"))
    return PromptInfo(prompt_tokens=tokens, max_tokens=max_tokens, stream=stream,
                      block_hashes=hashes[:tokens // BLOCK_TOKENS], media_hashes=media)


def _stream_options(options: Any) -> None:
    if options is None:
        return
    if not isinstance(options, Mapping):
        raise RequestError(f"'stream_options' must be an object, got {_short(options)}")
    if not isinstance(options.get("include_usage", False), bool):
        raise RequestError(f"'stream_options.include_usage' must be true or false, got "
                           f"{_short(options['include_usage'])}")


def _completion(body: Mapping[str, Any], hashed: int) -> tuple[int, tuple[int, ...]]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return count_tokens(prompt), text_block_hashes(prompt, hashed)
    if isinstance(prompt, list) and prompt and set(map(type, prompt)) == {int}:
        return len(prompt), token_block_hashes(prompt[:hashed])
    raise RequestError("'prompt' must be a string or a non-empty list of token ids")


def _chat(body: Mapping[str, Any], hashed: int) -> tuple[int, tuple[int, ...]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise RequestError(f"'messages[{i}]' must be an object")
        if not isinstance(message.get("content", ""), (str, list)):
            raise RequestError(f"'messages[{i}].content' must be a string or a list of parts")
    text = chat_text(messages)
    return count_tokens(text), text_block_hashes(text, hashed)


def media_hashes(messages: list[Any]) -> tuple[int, ...]:
    """Hashes of the distinct media parts of chat ``messages``, in order of first appearance.

    >>> image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    >>> len(media_hashes([{"role": "user", "content": [{"type": "text", "text": "what?"}, image, image]}]))
    1
    """
    seen: dict[int, None] = {}
    for message in messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if isinstance(part, Mapping) and part.get("type", "text") != "text":
                canonical = json.dumps(part, sort_keys=True, separators=(",", ":"), default=str).encode()
                seen.setdefault(int.from_bytes(hashlib.blake2b(canonical, digest_size=8).digest(), "big") >> 1)
    return tuple(seen)


def _count(value: Any, name: str, minimum: int) -> int:
    if type(value) is not int or not minimum <= value <= MAX_COUNT:
        raise RequestError(f"'{name}' must be an integer within [{minimum}, {MAX_COUNT}], got {_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
