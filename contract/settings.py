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
            shown = "(secret)" if field.metadata.get("secret", False) else None
            values[field.name] = convert(hints[field.name], environ[env], env, text=True, shown=shown)
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


_KINDS: dict[Any, str] = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
                          Path: "a path"}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def convert(kind: Any, value: Any, where: str, *, text: bool = False, shown: str | None = None) -> Any:
    """``value`` as a ``kind`` (bool, int, float, str, Path, a ``Literal`` or any of them ``| None``): the one
    reading of a setting's or a parameter's value, from a configuration file (``value`` as parsed from it) or,
    with ``text``, from the environment (``value`` a string; an empty one is None for an optional ``kind``).
    Raises :class:`SettingsError` ``"<where> must be <kind>, got <shown>"`` (with ``text``:
    ``"<where>=<shown>: must be <kind>"``; ``shown`` is the value's repr unless given, e.g. for a secret).

    >>> convert(float, 3, "'factor'"), convert(bool, "on", "X", text=True), convert(int | None, "", "X", text=True)
    (3.0, True, None)
    >>> convert(int, True, "'port'")
    Traceback (most recent call last):
    ...
    headroom.contract.settings.SettingsError: 'port' must be an integer, got True
    """
    if typing.get_origin(kind) in (types.UnionType, typing.Union) and type(None) in typing.get_args(kind):
        if value is None or (text and not value.strip()):
            return None
        (kind,) = (arg for arg in typing.get_args(kind) if arg is not type(None))
    if typing.get_origin(kind) is typing.Literal:
        if value in typing.get_args(kind):
            return value
        what = "one of " + ", ".join(map(repr, typing.get_args(kind)))
    elif kind not in _KINDS:
        raise SettingsError(f"{where} has a type no setting can take: {kind!r}")
    else:
        what = _KINDS[kind]
        converted = _from_text(kind, value) if text else _from_value(kind, value)
        if converted is not None:
            return converted
    shown = repr(value) if shown is None else shown
    raise SettingsError(f"{where}={shown}: must be {what}" if text else f"{where} must be {what}, got {shown}")


def _from_text(kind: Any, raw: str) -> Any:
    """``raw`` read as a ``kind``; None when it is not one."""
    if kind is bool:
        lowered = raw.strip().lower()
        return True if lowered in _TRUE else False if lowered in _FALSE else None
    try:
        return kind(raw)
    except ValueError:
        return None


def _from_value(kind: Any, value: Any) -> Any:
    """``value`` (as a YAML or JSON document holds it) as a ``kind``; None when it is not one."""
    if kind is bool or kind is str:
        return value if isinstance(value, kind) else None
    if isinstance(value, bool):
        return None
    if kind is int:
        return value if isinstance(value, int) else None
    if kind is float:
        return float(value) if isinstance(value, (int, float)) else None
    return Path(value) if isinstance(value, str) else None
