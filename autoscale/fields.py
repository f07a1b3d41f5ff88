"""Reading YAML documents field by field with errors that name the field path (``spec.metrics[0].type``).

Every function raises :class:`~autoscale.errors.ManifestError`; :class:`at_path` turns a
:class:`~autoscale.errors.SpecError` raised inside its block into one naming the path.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import TracebackType
from typing import Any, TypeVar

from headroom.autoscale.errors import ManifestError, SpecError

E = TypeVar("E", bound=Enum)


class at_path:
    """Re-raise a SpecError from inside a block as a ManifestError naming ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        if err is not None and isinstance(err, SpecError) and not isinstance(err, ManifestError):
            raise ManifestError(f"{self.path}: {err}") from err


def choice(kind: type[E], value: Any, path: str, what: str) -> E:
    try:
        return kind(value)
    except ValueError:
        raise ManifestError(f"{path}: unknown {what} {value!r} (one of {', '.join(k.value for k in kind)})") from None


def mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ManifestError(f"{path}: expected a mapping, got {type(value).__name__}")
    return value


def required(mapping: Mapping[str, Any], key: str, path: str) -> Any:
    if mapping.get(key) is None:
        raise ManifestError(f"{path}.{key}: required")
    return mapping[key]


def only(mapping: Mapping[str, Any], allowed: set[str], path: str) -> None:
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise ManifestError(f"{path}: unknown field(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")


def integer(value: Any, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(f"{path}: expected an integer, got {value!r}")
    return int(value)


def string(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise ManifestError(f"{path}: expected a non-empty string, got {value!r}")
    return value
