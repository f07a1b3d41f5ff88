"""Measuring a response as it passes through: TTFT, TPOT (per output token) and E2E, in milliseconds.

Streaming responses are Server-Sent Events of OpenAI chunks. TTFT is the time from dispatch to the first
chunk carrying generated text; TPOT is the time from that chunk to the last text chunk divided by the
output tokens after the first. The output token count comes from the final ``usage`` (the router asks
for it with ``stream_options.include_usage``); only when a server sends no usage does it fall back to
counting text chunks. Non-streaming responses give E2E and their ``usage``. Times are passed in.

Chunks are decoded into the few fields read (msgspec skips the rest without building it); a chunk whose
fields have unexpected types is read again as plain JSON, field by field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import msgspec


class _Delta(msgspec.Struct):
    content: Any = None


class _Choice(msgspec.Struct):
    text: Any = None
    delta: _Delta | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: dict[str, Any] | None = None
    error: Any = None


class _Usage(msgspec.Struct):
    usage: Any = None


_CHUNK = msgspec.json.Decoder(_Chunk)
_USAGE = msgspec.json.Decoder(_Usage)


@dataclass(frozen=True, slots=True)
class Completion:
    e2e_ms: float
    output_tokens: int
    prompt_tokens: int | None = None  # the server's own count, when it reports usage
    ttft_ms: float | None = None  # streaming only
    tpot_ms: float | None = None  # streaming with more than one output token


EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")  # a blank line, in any of SSE's three line endings


class StreamMeter:
    """Feeds SSE bytes in arrival order; :meth:`finish` returns the measured :class:`Completion`."""

    def __init__(self, dispatched: float):
        self.dispatched = dispatched
        self.first_text: float | None = None
        self.last_text: float | None = None
        self.text_chunks = 0
        self.usage: dict[str, Any] | None = None
        self.error: str | None = None
        self.done = False  # the stream's ``data: [DONE]`` came: it ended whole
        self._buffer = b""

    def feed(self, data: bytes, now: float) -> bool:
        """Take the next bytes of the stream; True when they completed a chunk carrying text."""
        texts = self.text_chunks
        *events, self._buffer = EVENT_END.split(self._buffer + data)
        for event in events:
            self._event(event, now)
        return self.text_chunks > texts

    def _event(self, event: bytes, now: float) -> None:
        for line in event.splitlines():
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                return
            try:
                typed = _CHUNK.decode(payload)
            except msgspec.ValidationError:
                self._plain(payload, now)
                continue
            except msgspec.DecodeError:
                continue
            if typed.usage is not None:
                self.usage = typed.usage
            if typed.error is not None:
                self.error = str(typed.error)
            if typed.choices and any(_typed_text(choice) for choice in typed.choices):
                self._text(now)

    def _plain(self, payload: bytes, now: float) -> None:
        try:
            chunk = json.loads(payload)
        except ValueError:
            return
        if not isinstance(chunk, dict):
            return
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        if "error" in chunk:
            self.error = str(chunk["error"])
        if any(_text_of(choice) for choice in chunk.get("choices") or () if isinstance(choice, dict)):
            self._text(now)

    def _text(self, now: float) -> None:
        self.first_text = now if self.first_text is None else self.first_text
        self.last_text = now
        self.text_chunks += 1

    @property
    def partial(self) -> bool:
        """Whether bytes of an event came after the last whole event."""
        return bool(self._buffer.strip())

    def finish(self, now: float) -> Completion:
        e2e = (now - self.dispatched) * 1000.0
        tokens = _usage_int(self.usage, "completion_tokens")
        output = tokens if tokens is not None else self.text_chunks
        ttft = None if self.first_text is None else (self.first_text - self.dispatched) * 1000.0
        tpot = None
        if ttft is not None and output > 1 and self.last_text is not None:
            tpot = (self.last_text - self.first_text) * 1000.0 / (output - 1)  # type: ignore[operator]
        return Completion(e2e_ms=e2e, output_tokens=output, prompt_tokens=_usage_int(self.usage, "prompt_tokens"),
                          ttft_ms=ttft if ttft is not None else (e2e if output == 0 else None), tpot_ms=tpot)


def meter_json(body: bytes, dispatched: float, now: float) -> Completion | None:
    """The completion of a non-streaming JSON response; None when ``body`` is not one whole JSON document (an
    answer cut short)."""
    try:
        usage = _USAGE.decode(body).usage
    except msgspec.ValidationError:  # JSON, but no object
        usage = None
    except msgspec.DecodeError:
        return None
    return Completion(e2e_ms=(now - dispatched) * 1000.0, output_tokens=_usage_int(usage, "completion_tokens") or 0,
                      prompt_tokens=_usage_int(usage, "prompt_tokens"))


def _typed_text(choice: _Choice) -> bool:
    content = choice.delta.content if choice.delta is not None else None
    return bool(content) if isinstance(content, str) else isinstance(choice.text, str) and bool(choice.text)


def _text_of(choice: dict[str, Any]) -> str:
    delta = choice.get("delta")
    content = delta.get("content") if isinstance(delta, dict) else None
    if isinstance(content, str):
        return content
    text = choice.get("text")
    return text if isinstance(text, str) else ""


def _usage_int(usage: Any, key: str) -> int | None:
    if isinstance(usage, dict):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None
