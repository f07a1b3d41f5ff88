"""What one request may ask of the router: explicit limits, the same on every surface (HTTP proxy, Pick
API, Envoy ext_proc), each refused with an error naming the limit — HTTP 413 for a body too large, 400
otherwise; gRPC ``INVALID_ARGUMENT``. They bound the work a request does on the event loop before it is
scheduled (``headroom bench request-limits`` measures it at the limits):

- ``max_body_bytes`` (1 MiB): a request body.
- ``max_json_depth`` (32): how deeply the body's JSON nests; checked on the raw bytes before parsing
  (:func:`json_depth`), so no nesting can exhaust the parser's recursion.
- ``max_hashed_tokens`` (32768): prompt tokens hashed for the prefix index. A longer prompt is counted in
  full and matched on its first ``max_hashed_tokens`` tokens; its prefix fraction stays relative to the
  whole prompt.
- ``max_block_hashes`` (8192): block hashes a request may bring (the Pick API's ``block_hashes``, a body's
  ``headroom.hash_ids``).
- ``max_candidates`` (256): candidate servers in one Pick call.

>>> json_depth(b'{"a": [1, {"b": "[[[not nesting]]]"}], "c": "\\\\"}')
3
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from headroom.router.errors import InvalidJson, RequestError, RequestTooLarge

_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')  # every byte but brackets and quotes
_decode = msgspec.json.Decoder().decode  # several times faster than the json module on long lists of numbers


@dataclass(frozen=True)
class RequestLimits:
    max_body_bytes: int = 1024 * 1024
    max_json_depth: int = 32
    max_hashed_tokens: int = 32768
    max_block_hashes: int = 8192
    max_candidates: int = 256

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if value < 1:
                raise ValueError(f"request limit {name} must be at least 1, got {value}")

    def check_body_size(self, size: int) -> None:
        if size > self.max_body_bytes:
            raise RequestTooLarge(f"request body of {size} bytes is over the limit of {self.max_body_bytes} bytes "
                                  f"(max_body_bytes)")

    def parse_json(self, raw: bytes) -> Any:
        """The JSON document in ``raw``, within the size and depth limits; raises :class:`RequestError`."""
        self.check_body_size(len(raw))
        openings = raw.count(b"[") + raw.count(b"{")  # no deeper than this; counting is cheaper than measuring
        if openings > self.max_json_depth and (depth := json_depth(raw)) > self.max_json_depth:
            raise RequestError(f"request body nests {depth} levels deep, over the limit of {self.max_json_depth} "
                               f"(max_json_depth)")
        try:
            return _decode(raw)
        except (msgspec.DecodeError, RecursionError) as err:
            raise InvalidJson(f"request body is not valid JSON: {err}") from None

    def check_block_hashes(self, count: int, where: str) -> None:
        if count > self.max_block_hashes:
            raise RequestError(f"{where} holds {count} block hashes, over the limit of {self.max_block_hashes} "
                               f"(max_block_hashes)")

    def check_candidates(self, count: int) -> None:
        if count > self.max_candidates:
            raise RequestError(f"{count} candidates, over the limit of {self.max_candidates} per call "
                               f"(max_candidates)")


def json_depth(raw: bytes) -> int:
    """How deeply the arrays and objects of a JSON text nest (0: a scalar), brackets inside strings aside;
    a malformed text gets a number the parser then refuses. Runs in C and numpy, never in recursion."""
    if b"[" not in raw and b"{" not in raw:
        return 0
    marks = np.frombuffer(raw.translate(None, _STRUCTURE) if b"\\" not in raw else _structure(raw), np.uint8)
    quotes = marks == ord('"')
    outside = (np.cumsum(quotes, dtype=np.int32) & 1) == 0  # an even number of quotes so far: not in a string
    step = ((marks == ord("[")) | (marks == ord("{"))).astype(np.int32)
    step -= (marks == ord("]")) | (marks == ord("}"))
    step *= outside
    return int(np.cumsum(step).max(initial=0))


def _structure(raw: bytes) -> bytes:
    """The brackets and unescaped quotes of a JSON text that has backslashes, in order."""
    data = np.frombuffer(b" " + raw, np.uint8)  # a leading byte, so every quote has one before it
    position = np.arange(len(data))
    last_plain = np.maximum.accumulate(np.where(data == ord("\\"), 0, position))  # latest byte that is no backslash
    quotes = np.flatnonzero(data == ord('"'))
    escaped = (quotes - 1 - last_plain[quotes - 1]) % 2 == 1  # an odd run of backslashes right before
    keep = (data == ord("[")) | (data == ord("]")) | (data == ord("{")) | (data == ord("}"))
    keep[quotes[~escaped]] = True
    structure: bytes = data[keep].tobytes()
    return structure
