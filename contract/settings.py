"""Typed settings, each declared once with a type, a default, an environment variable and a description.

A service declares a frozen dataclass whose fields are made with :func:`setting`, and builds it once
at its entry point with :func:`from_env`; nothing else reads the environment. A field made with
:func:`nested` holds another settings dataclass, built from the same environment (the Kafka client's
security inside :class:`~contract.topics.KafkaSettings`). A ``secret`` setting never shows its value: not
in the dataclass's ``repr``, not in an error message. A setting typed ``X | None`` is None when unset or empty.

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
import types
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


def setting(default: Any, env: str, doc: str, *, secret: bool = False) -> Any:
    """A dataclass field with its environment variable and one-line description; a ``secret`` one is left
    out of the ``repr``."""
    return dataclasses.field(default=default, repr=not secret, metadata={"env": env, "doc": doc, "secret": secret})


def nested(cls: type[Any], doc: str) -> Any:
    """A dataclass field holding the settings dataclass ``cls``, built by :func:`from_env` from the same
    environment."""
    return dataclasses.field(default_factory=cls, metadata={"nested": cls, "doc": doc})


def from_env(cls: type[T], environ: Mapping[str, str] | None = None, **overrides: Any) -> T:
    """Build ``cls`` from its defaults, then the environment, then explicit ``overrides``."""
    environ = os.environ if environ is None else environ
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        env = field.metadata.get("env")
        if "nested" in field.metadata and field.name not in overrides:
            values[field.name] = from_env(field.metadata["nested"], environ)
        elif env and env in environ:
            values[field.name] = _parse(hints[field.name], environ[env], env, field.metadata.get("secret", False))
    values.update(overrides)
    return cls(**values)


def describe(cls: type) -> list[tuple[str, str, Any, str]]:
    """``(field, env var, default, description)`` for every setting of ``cls`` (those of a nested settings
    dataclass as ``field.inner``), for help texts."""
    rows = []
    for f in dataclasses.fields(cls):
        if "nested" in f.metadata:
            rows += [(f"{f.name}.{name}", env, default, doc) for name, env, default, doc in describe(f.metadata["nested"])]
        else:
            rows.append((f.name, f.metadata.get("env", ""), f.default, f.metadata.get("doc", "")))
    return rows


def _parse(kind: Any, raw: str, env: str, secret: bool = False) -> Any:
    optional = typing.get_origin(kind) in (types.UnionType, typing.Union) and type(None) in typing.get_args(kind)
    if optional:
        if not raw.strip():
            return None
        (kind,) = (arg for arg in typing.get_args(kind) if arg is not type(None))
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
        shown = "(secret)" if secret else repr(raw)
        raise SettingsError(f"{env}={shown}: {err}") from (None if secret else err)
    raise SettingsError(f"{env}: settings of type {kind!r} cannot be read from the environment")
