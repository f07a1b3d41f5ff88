"""Plugin parameters: a frozen dataclass of defaults per plugin, overlaid with a raw mapping from config.

Config keys are camelCase (``affinityThreshold``), fields snake_case (``affinity_threshold``). Unknown
keys, wrong types and out-of-range values raise :class:`~router.errors.ConfigError` naming the plugin,
the key and the value. A params class checks its ranges in ``__post_init__`` by raising ``ValueError``.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from headroom.contract.settings import SettingsError, convert
from headroom.router.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

P = TypeVar("P", bound="DataclassInstance")


def camel(name: str) -> str:
    """``affinity_threshold`` -> ``affinityThreshold``; ``max_ttft_penalty_ms`` -> ``maxTTFTPenaltyMs``."""
    head, *rest = name.split("_")
    return head + "".join(_ACRONYMS.get(part, part.capitalize()) for part in rest)


_ACRONYMS = {"ttft": "TTFT", "tpot": "TPOT", "kv": "KV", "slo": "SLO"}


def build_params(cls: type[P], raw: Mapping[str, Any] | None, plugin: str) -> P:
    """``cls`` with its defaults overlaid by ``raw``; ``plugin`` names the instance in errors."""
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        raise ConfigError(f"plugin {plugin!r}: params must be a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    by_key = {camel(f.name): f.name for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        field_name = by_key.get(key)
        if field_name is None:
            known = ", ".join(sorted(by_key)) or "none"
            raise ConfigError(f"plugin {plugin!r}: unknown parameter {key!r} (known: {known})")
        values[field_name] = _coerce(hints[field_name], value, plugin, key)
    try:
        return cls(**values)
    except ValueError as err:
        raise ConfigError(f"plugin {plugin!r}: {err}") from err


def check_range(name: str, value: float, low: float, high: float) -> None:
    """Raise ``ValueError`` naming the camelCase parameter when ``value`` is outside ``[low, high]``."""
    if not low <= value <= high:
        raise ValueError(f"parameter {camel(name)!r} must be within [{low}, {high}], got {value}")


def _coerce(kind: Any, value: Any, plugin: str, key: str) -> Any:
    where = f"plugin {plugin!r}: parameter {key!r}"
    try:
        converted = convert(kind, value, where)
    except SettingsError as err:
        raise ConfigError(str(err)) from None
    if converted != converted:  # NaN: no parameter takes it
        raise ConfigError(f"{where} must be a number, got {value!r}")
    return converted
