"""The scheduling pipeline as data: plugin instances, profiles of them, and which profile serves whom.

Config shape (YAML or a dict)::

    predictAll: true               # predict every request unless it opts out; false: only those that opt in
    predictedProfile: predicted    # the predicted-latency profile
    heuristicProfile: heuristic    # the fallback and default profile
    defaultSLO: {ttftMs: 1000, tpotMs: 50}   # the pool's SLO for requests without SLO headers (default: none)
    plugins:  [{type: latency-scorer, name: latency, params: {headroomSelectionStrategy: least}}, ...]
    profiles: [{name: predicted, plugins: [{ref: latency, weight: 1}, ...]}, ...]

A plugin's role comes from its type. A profile has at most one producer and one admitter, any number of
filters and scorers (only scorers take a ``weight``, default 1), and exactly one picker. The predicted
profile must have a producer. A request that sends no SLO header is held to ``defaultSLO`` when it is set
(``tpotMs`` applies to streaming requests only), and is scheduled exactly as if it had sent those headers.
Loading is strict: unknown keys, unknown types, duplicate names,
dangling refs and bad params raise :class:`~router.errors.ConfigError` naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from headroom.router.errors import ConfigError
from headroom.router.framework.registry import REGISTRY
from headroom.router.framework.roles import Admitter, Filter, Picker, Producer, Request, Scorer, role_of


@dataclass(frozen=True)
class Profile:
    name: str
    picker: Picker
    producer: Producer | None = None
    filters: tuple[Filter, ...] = ()
    scorers: tuple[tuple[Scorer, float], ...] = ()
    admitter: Admitter | None = None


@dataclass(frozen=True)
class Pipeline:
    predicted: Profile
    heuristic: Profile
    predict_all: bool = True
    default_slo_ttft_ms: float | None = None
    default_slo_tpot_ms: float | None = None

    def with_default_slo(self, request: Request) -> Request:
        """``request`` held to the pool's default SLO when it states none of its own."""
        if request.has_slo or (self.default_slo_ttft_ms is None and self.default_slo_tpot_ms is None):
            return request
        return replace(request, slo_ttft_ms=self.default_slo_ttft_ms, slo_tpot_ms=self.default_slo_tpot_ms)


# After the SLO tiers, the predicted profile keeps the servers where the fewest running streams are over their
# TPOT SLO (tpot-protection-filter): on bursty loads of short outputs, a prefill landing among streams that need
# clean decode steps spreads TPOT misses over the pool. It then takes the best score (max-score-picker) rather
# than drawing ∝ score (the reference) or ∝ score²: over three traces, three burstiness levels and two seeds its
# worst SLO attainment against the best baseline was the highest (docs/benchmarks.md, "Attainment-aware
# scheduling"). Before that, a request predicted to miss its SLO everywhere in a burst joins the servers furthest
# behind (late-concentration-filter), so the others keep serving within SLO: past capacity on the bursty code
# loads it turns a 4–10-point loss to least-KV into a 2–6-point lead on burst 8 and Poisson, and a loss of under
# 3 points on burst 30 (docs/benchmarks.md, "Headroom after these changes"); where the front can wait, such a
# request is first held at the router until a server is idle, so the burst's late requests are drained by the
# whole pool rather than by those servers (docs/benchmarks.md, "Holding the late requests at the router"). The
# heuristic profile keeps the reference picker.

DEFAULT_PIPELINE: dict[str, Any] = {
    "predictAll": True,
    "predictedProfile": "predicted",
    "heuristicProfile": "heuristic",
    "plugins": [
        {"type": "predicted-latency-producer", "name": "producer"},
        {"type": "prefix-cache-affinity-filter", "name": "affinity"},
        {"type": "slo-headroom-tier-filter", "name": "tiers"},
        {"type": "late-concentration-filter", "name": "concentrate"},
        {"type": "tpot-protection-filter", "name": "protect"},
        {"type": "latency-scorer", "name": "latency"},
        {"type": "latency-slo-admitter", "name": "admitter"},
        {"type": "kv-cache-free-scorer", "name": "kv-free"},
        {"type": "queue-scorer", "name": "queue"},
        {"type": "prefix-match-scorer", "name": "prefix"},
        {"type": "weighted-random-picker", "name": "picker"},
        {"type": "max-score-picker", "name": "predicted-picker"},
    ],
    "profiles": [
        {"name": "predicted", "plugins": [{"ref": "producer"}, {"ref": "affinity"}, {"ref": "tiers"},
                                          {"ref": "concentrate"}, {"ref": "protect"}, {"ref": "latency"},
                                          {"ref": "admitter"}, {"ref": "predicted-picker"}]},
        {"name": "heuristic", "plugins": [{"ref": "kv-free", "weight": 1}, {"ref": "queue", "weight": 1},
                                          {"ref": "prefix", "weight": 1}, {"ref": "picker"}]},
    ],
}

_TOP_KEYS = {"predictAll", "predictedProfile", "heuristicProfile", "defaultSLO", "plugins", "profiles"}


def load_pipeline(raw: Mapping[str, Any] | None) -> Pipeline:
    """Build a :class:`Pipeline` from config data; ``None`` gives the default pipeline."""
    raw = DEFAULT_PIPELINE if raw is None else raw
    _mapping(raw, "scheduling")
    _no_unknown(raw, _TOP_KEYS, "scheduling")
    plugins = _build_plugins(raw.get("plugins", DEFAULT_PIPELINE["plugins"]))
    profiles = {}
    for i, entry in enumerate(_list(raw.get("profiles", DEFAULT_PIPELINE["profiles"]), "scheduling.profiles")):
        profile = _build_profile(entry, plugins, f"scheduling.profiles[{i}]")
        if profile.name in profiles:
            raise ConfigError(f"scheduling.profiles[{i}]: duplicate profile name {profile.name!r}")
        profiles[profile.name] = profile
    predicted = _profile_ref(raw, "predictedProfile", profiles)
    heuristic = _profile_ref(raw, "heuristicProfile", profiles)
    if predicted.producer is None:
        raise ConfigError(f"scheduling.predictedProfile: profile {predicted.name!r} has no producer plugin")
    predict_all = raw.get("predictAll", DEFAULT_PIPELINE["predictAll"])
    if not isinstance(predict_all, bool):
        raise ConfigError(f"scheduling.predictAll must be true or false, got {predict_all!r}")
    ttft, tpot = _default_slo(raw.get("defaultSLO", DEFAULT_PIPELINE.get("defaultSLO")))
    return Pipeline(predicted=predicted, heuristic=heuristic, predict_all=predict_all, default_slo_ttft_ms=ttft,
                    default_slo_tpot_ms=tpot)


def _default_slo(raw: Any) -> tuple[float | None, float | None]:
    """``(ttft_ms, tpot_ms)`` of a ``defaultSLO`` entry (None: not set)."""
    if raw is None:
        return None, None
    _mapping(raw, "scheduling.defaultSLO")
    _no_unknown(raw, {"ttftMs", "tpotMs"}, "scheduling.defaultSLO")
    values = []
    for key in ("ttftMs", "tpotMs"):
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            raise ConfigError(f"scheduling.defaultSLO.{key} must be a positive number of ms, got {value!r}")
        values.append(None if value is None else float(value))
    return values[0], values[1]


def _build_plugins(entries: Any) -> dict[str, Any]:
    plugins: dict[str, Any] = {}
    for i, entry in enumerate(_list(entries, "scheduling.plugins")):
        where = f"scheduling.plugins[{i}]"
        _mapping(entry, where)
        _no_unknown(entry, {"type", "name", "params"}, where)
        kind = entry.get("type")
        if kind not in REGISTRY:
            raise ConfigError(f"{where}: unknown plugin type {kind!r} (known: {', '.join(sorted(REGISTRY))})")
        name = entry.get("name", kind)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: plugin name must be a non-empty string, got {name!r}")
        if name in plugins:
            raise ConfigError(f"{where}: duplicate plugin name {name!r}")
        plugins[name] = REGISTRY[kind](name, entry.get("params"))
    return plugins


def _build_profile(entry: Any, plugins: Mapping[str, Any], where: str) -> Profile:
    _mapping(entry, where)
    _no_unknown(entry, {"name", "plugins"}, where)
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: profile name must be a non-empty string, got {name!r}")
    by_role: dict[str, list[Any]] = {"producer": [], "filter": [], "scorer": [], "admitter": [], "picker": []}
    for j, item in enumerate(_list(entry.get("plugins"), f"{where}.plugins")):
        at = f"profile {name!r} plugins[{j}]"
        _mapping(item, at)
        _no_unknown(item, {"ref", "weight"}, at)
        ref = item.get("ref")
        if ref not in plugins:
            raise ConfigError(f"{at}: ref {ref!r} names no plugin (defined: {', '.join(sorted(plugins))})")
        plugin = plugins[ref]
        role = role_of(plugin)
        if role == "scorer":
            weight = item.get("weight", 1.0)
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
                raise ConfigError(f"{at}: weight of {ref!r} must be a positive number, got {weight!r}")
            by_role["scorer"].append((plugin, float(weight)))
        elif "weight" in item:
            raise ConfigError(f"{at}: {ref!r} is a {role}; only scorers take a weight")
        else:
            by_role[role].append(plugin)
    for role in ("producer", "admitter", "picker"):
        if len(by_role[role]) > 1:
            raise ConfigError(f"profile {name!r}: more than one {role} "
                              f"({', '.join(p.name for p in by_role[role])})")
    if not by_role["picker"]:
        raise ConfigError(f"profile {name!r}: needs exactly one picker")
    return Profile(name=name, picker=by_role["picker"][0],
                   producer=by_role["producer"][0] if by_role["producer"] else None,
                   filters=tuple(by_role["filter"]), scorers=tuple(by_role["scorer"]),
                   admitter=by_role["admitter"][0] if by_role["admitter"] else None)


def _profile_ref(raw: Mapping[str, Any], key: str, profiles: Mapping[str, Profile]) -> Profile:
    name = raw.get(key, DEFAULT_PIPELINE[key])
    if name not in profiles:
        raise ConfigError(f"scheduling.{key}: {name!r} names no profile (defined: {', '.join(sorted(profiles))})")
    return profiles[name]


def _mapping(value: Any, where: str) -> None:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {type(value).__name__}")


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{where} must be a list, got {type(value).__name__}")
    return value


def _no_unknown(entry: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(entry) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(known))})")
