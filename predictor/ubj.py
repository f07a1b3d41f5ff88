"""XGBoost's UBJ model format read without XGBoost: UBJSON (ubjson.org) objects, arrays, strings and numbers.

Numbers are big-endian. A container may declare the type (``$``) and count (``#``) of its elements; XGBoost does
for its numeric arrays, which become numpy arrays here, without a Python object per element. Every count is
checked against the bytes left before anything is allocated, and nesting is bounded, so no message can make the
reader allocate or recurse beyond its own size.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from headroom.errors import HeadroomError

MAX_NESTING = 32  # XGBoost's models nest 6 deep
_NUMBERS = {b"i": ">b", b"U": ">B", b"I": ">h", b"l": ">i", b"L": ">q", b"d": ">f", b"D": ">d"}
_INTEGERS = b"iUIlL"
_CONSTANTS: dict[bytes, Any] = {b"Z": None, b"T": True, b"F": False}


class UbjError(HeadroomError, ValueError):
    """Bytes that are not the UBJSON this reader takes; the message says what and where."""


def decode(raw: bytes) -> Any:
    """The value ``raw`` holds: dicts, lists, strings, numbers, booleans, None and 1-D numpy arrays."""
    reader = _Reader(raw)
    value = reader.value(reader.marker(), 0)
    if reader.at != len(raw):
        raise UbjError(f"{len(raw) - reader.at} bytes after the end of the document")
    return value


class _Reader:
    def __init__(self, raw: bytes) -> None:
        self.raw, self.at = raw, 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.raw):
            raise UbjError(f"truncated at byte {self.at}: {n} bytes needed, {len(self.raw) - self.at} left")
        chunk = self.raw[self.at:self.at + n]
        self.at += n
        return chunk

    def marker(self) -> bytes:
        marker = self.take(1)
        while marker == b"N":  # no-op
            marker = self.take(1)
        return marker

    def value(self, marker: bytes, depth: int) -> Any:
        if marker in _CONSTANTS:
            return _CONSTANTS[marker]
        if marker in _NUMBERS:
            return self.number(marker)
        if marker == b"S":
            return self.string()
        if marker == b"C":
            return self.take(1).decode("latin-1")
        if marker in (b"[", b"{"):
            if depth >= MAX_NESTING:
                raise UbjError(f"containers nested deeper than {MAX_NESTING} at byte {self.at}")
            return self.array(depth + 1) if marker == b"[" else self.object(depth + 1)
        raise UbjError(f"unknown marker {marker!r} at byte {self.at - 1}")

    def number(self, marker: bytes) -> int | float:
        form = _NUMBERS[marker]
        value: int | float = struct.unpack(form, self.take(struct.calcsize(form)))[0]
        return value

    def length(self) -> int:
        marker = self.marker()
        if marker not in _INTEGERS:
            raise UbjError(f"a length must be an integer, got marker {marker!r} at byte {self.at - 1}")
        length = int(self.number(marker))
        if length < 0:
            raise UbjError(f"negative length {length} at byte {self.at}")
        return length

    def string(self) -> str:
        at = self.at
        try:
            return self.take(self.length()).decode()
        except UnicodeDecodeError as err:
            raise UbjError(f"the string at byte {at} is not UTF-8: {err}") from err

    def header(self, size_of_one: int = 1) -> tuple[bytes | None, int | None]:
        """A container's declared element type and count, if any."""
        kind = None
        if self.raw[self.at:self.at + 1] == b"$":
            self.at += 1
            kind = self.take(1)
            if self.raw[self.at:self.at + 1] != b"#":
                raise UbjError(f"a typed container needs a count ('#') at byte {self.at}")
        if self.raw[self.at:self.at + 1] != b"#":
            return None, None
        self.at += 1
        count = self.length()
        if kind in _NUMBERS:
            size_of_one = struct.calcsize(_NUMBERS[kind])
        if count * size_of_one > len(self.raw) - self.at:
            raise UbjError(f"a container of {count} elements at byte {self.at} is longer than the "
                           f"{len(self.raw) - self.at} bytes left")
        return kind, count

    def array(self, depth: int) -> list[Any] | np.ndarray:
        kind, count = self.header()
        if kind in _NUMBERS and count is not None:
            dtype = np.dtype(_NUMBERS[kind])
            return np.frombuffer(self.take(count * dtype.itemsize), dtype=dtype).astype(dtype.newbyteorder("="))
        if count is not None:
            return [self.value(kind or self.marker(), depth) for _ in range(count)]
        items = []
        while (marker := self.marker()) != b"]":
            items.append(self.value(marker, depth))
        return items

    def object(self, depth: int) -> dict[str, Any]:
        kind, count = self.header(size_of_one=2)  # a key's length and its value's marker at least
        items: dict[str, Any] = {}
        if count is not None:
            for _ in range(count):
                key = self.string()
                items[key] = self.value(kind or self.marker(), depth)
            return items
        while self.raw[self.at:self.at + 1] != b"}":
            if self.at >= len(self.raw):
                raise UbjError("truncated: an object is not closed")
            key = self.string()
            items[key] = self.value(self.marker(), depth)
        self.at += 1
        return items
