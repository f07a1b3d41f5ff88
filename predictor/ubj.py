"""XGBoost's UBJ model format read without XGBoost: UBJSON (ubjson.org) objects, arrays, strings and numbers.

Numbers are big-endian. A container may declare the type (``$``) and count (``#``) of its elements; XGBoost does
for its numeric arrays, which become read-only big-endian numpy arrays over the document's bytes, without a copy
or a Python object per element. Every count is
checked against the bytes left before anything is allocated, and nesting is bounded, so no message can make the
reader allocate or recurse beyond its own size.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from headroom.errors import HeadroomError

MAX_NESTING = 32  # XGBoost's models nest 6 deep
_FORMATS = {"i": ">b", "U": ">B", "I": ">h", "l": ">i", "L": ">q", "d": ">f", "D": ">d"}
_NUMBERS = {ord(marker): struct.Struct(form) for marker, form in _FORMATS.items()}  # markers as byte values
_DTYPES = {ord(marker): np.dtype(form) for marker, form in _FORMATS.items()}
_INTEGERS = {ord(marker): _NUMBERS[ord(marker)] for marker in "iUIlL"}
_CONSTANTS: dict[int, Any] = {ord("Z"): None, ord("T"): True, ord("F"): False}
_NOOP, _STRING, _CHAR, _ARRAY, _OBJECT = map(ord, "NSC[{")
_TYPE, _COUNT, _ARRAY_END, _OBJECT_END = map(ord, "$#]}")


class UbjError(HeadroomError, ValueError):
    """Bytes that are not the UBJSON this reader takes; the message says what and where."""


def decode(raw: bytes) -> Any:
    """The value ``raw`` holds: dicts, lists, strings, numbers, booleans, None and 1-D numpy arrays."""
    reader = _Reader(bytes(raw))
    try:
        value = reader.value(reader.marker(), 0)
    except (IndexError, struct.error) as err:  # a read past the end
        raise UbjError(f"truncated: the document ends inside the value being read at byte {reader.at}") from err
    if reader.at != len(raw):
        raise UbjError(f"{len(raw) - reader.at} bytes after the end of the document")
    return value


class _Reader:
    """A cursor over the document: markers are read as byte values and numbers in place; a read past the end
    raises IndexError or struct.error, which :func:`decode` reports."""

    def __init__(self, raw: bytes) -> None:
        self.raw, self.at = raw, 0

    def marker(self) -> int:
        raw = self.raw
        marker = raw[self.at]
        self.at += 1
        while marker == _NOOP:
            marker = raw[self.at]
            self.at += 1
        return marker

    def value(self, marker: int, depth: int) -> Any:
        form = _NUMBERS.get(marker)
        if form is not None:
            value = form.unpack_from(self.raw, self.at)[0]
            self.at += form.size
            return value
        if marker == _STRING:
            return self.string()
        if marker in (_ARRAY, _OBJECT):
            if depth >= MAX_NESTING:
                raise UbjError(f"containers nested deeper than {MAX_NESTING} at byte {self.at}")
            return self.array(depth + 1) if marker == _ARRAY else self.object(depth + 1)
        if marker in _CONSTANTS:
            return _CONSTANTS[marker]
        if marker == _CHAR:
            self.at += 1
            return chr(self.raw[self.at - 1])
        raise UbjError(f"unknown marker {bytes([marker])!r} at byte {self.at - 1}")

    def length(self) -> int:
        raw, at = self.raw, self.at
        form = _INTEGERS.get(raw[at])
        if form is None:
            raise UbjError(f"a length must be an integer, got marker {bytes([raw[at]])!r} at byte {at}")
        length: int = form.unpack_from(raw, at + 1)[0]
        self.at = at + 1 + form.size
        if length < 0:
            raise UbjError(f"negative length {length} at byte {at}")
        return length

    def string(self) -> str:
        at, length = self.at, self.length()
        end = self.at + length
        if end > len(self.raw):
            raise UbjError(f"truncated: a string of {length} bytes at byte {at}, {len(self.raw) - self.at} left")
        self.at = end
        try:
            return self.raw[end - length:end].decode()
        except UnicodeDecodeError as err:
            raise UbjError(f"the string at byte {at} is not UTF-8: {err}") from err

    def header(self, size_of_one: int = 1) -> tuple[int | None, int | None]:
        """A container's declared element type and count, if any."""
        raw, kind = self.raw, None
        if raw[self.at] == _TYPE:
            kind = raw[self.at + 1]
            self.at += 2
            if raw[self.at] != _COUNT:
                raise UbjError(f"a typed container needs a count ('#') at byte {self.at}")
        if raw[self.at] != _COUNT:
            return None, None
        self.at += 1
        count = self.length()
        if kind in _NUMBERS:
            size_of_one = _NUMBERS[kind].size
        if count * size_of_one > len(raw) - self.at:
            raise UbjError(f"a container of {count} elements at byte {self.at} is longer than the "
                           f"{len(raw) - self.at} bytes left")
        return kind, count

    def array(self, depth: int) -> list[Any] | np.ndarray:
        kind, count = self.header()
        if kind is not None and count is not None and kind in _DTYPES:
            dtype = _DTYPES[kind]
            values = np.frombuffer(self.raw, dtype=dtype, count=count, offset=self.at)
            self.at += count * dtype.itemsize
            return values  # big-endian, read-only, over the document's bytes: numpy converts it where it is used
        if count is not None:
            return [self.value(self.marker() if kind is None else kind, depth) for _ in range(count)]
        items = []
        while (marker := self.marker()) != _ARRAY_END:
            items.append(self.value(marker, depth))
        return items

    def object(self, depth: int) -> dict[str, Any]:
        kind, count = self.header(size_of_one=2)  # a key's length and its value's marker at least
        items: dict[str, Any] = {}
        if count is not None:
            for _ in range(count):
                key = self.string()
                items[key] = self.value(self.marker() if kind is None else kind, depth)
            return items
        raw = self.raw
        while raw[self.at] != _OBJECT_END:
            key = self.string()
            items[key] = self.value(self.marker(), depth)
        self.at += 1
        return items
