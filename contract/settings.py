"""Typed settings, each declared once with a type, a default, an environment variable and a description.

A service declares a frozen dataclass whose fields are made with :func:`setting`, and builds it once
at its entry point with :func:`from_env`; nothing else reads the environment.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Example:
...     port: int = setting(8080, "EXAMPLE_PORT", "Port to listen on.")
>>> from_env(Example, {"EXAMPLE_PORT": "9000"}).port
9000
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from headroom.errors import HeadroomError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


class SettingsError(HeadroomError, ValueError):
    """An environment variable holds a value its setting cannot take."""


def setting(default: Any, env: str, doc: str) -> Any:
    """A dataclass field with its environment variable and one-line description."""
    return dataclasses.field(default=default, metadata={"env": env, "doc": doc})


def from_env(cls: type[T], environ: Mapping[str, str] | None = None, **overrides: Any) -> T:
    """Build ``cls`` from its defaults, then the environment, then explicit ``overrides``."""
    environ = os.environ if environ is None else environ
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        env = field.metadata.get("env")
        if env and env in environ:
            values[field.name] = _parse(hints[field.name], environ[env], env)
    values.update(overrides)
    return cls(**values)


def describe(cls: type) -> list[tuple[str, str, Any, str]]:
    """``(field, env var, default, description)`` for every setting of ``cls``, for help texts."""
    return [(f.name, f.metadata.get("env", ""), f.default, f.metadata.get("doc", ""))
            for f in dataclasses.fields(cls)]


def _parse(kind: Any, raw: str, env: str) -> Any:
    try:
        if kind is bool:
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true/false")
        if kind in (int, float, str, Path):
            return kind(raw)
    except ValueError as err:
        raise SettingsError(f"{env}={raw!r}: {err}") from err
    raise SettingsError(f"{env}: settings of type {kind!r} cannot be read from the environment")
