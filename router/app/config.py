"""The router's config file (YAML)::

    settings: {httpPort: 8080, predictor: embedded, ...}   # RouterSettings fields, camelCase
    servers: [{id: s1, address: "10.0.0.1:8000", pool: h100}]  # or:
    serversFile: servers.yaml                                 # reread when it changes; or:
    pods: {namespace: llm, selector: {app: vllm}, port: 8000}  # watched in Kubernetes (router.state.pods)
    scheduling: {...}                                         # see router.framework.pipeline; default if left out

Kafka comes from the environment (:class:`contract.topics.KafkaSettings`). Loading is strict; every
error names the key and the value.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from headroom.contract.settings import SettingsError, convert, from_env
from headroom.router.app.settings import RouterSettings
from headroom.router.errors import ConfigError
from headroom.router.framework.params import camel
from headroom.router.framework.pipeline import Pipeline, load_pipeline
from headroom.router.state.pods import PodSelector, parse_pods
from headroom.router.state.servers import ServerSpec, parse_servers

_KEYS = {"settings", "servers", "serversFile", "pods", "scheduling"}
_POSITIVE = ("max_head_bytes", "max_headers", "request_arrival_s", "keep_alive_s", "upstream_pool_idle_s",
             "upstream_first_byte_factor", "upstream_first_byte_min_s", "upstream_first_byte_max_s", "max_connections")


@dataclass(frozen=True)
class RouterConfig:
    settings: RouterSettings
    pipeline: Pipeline
    servers: tuple[ServerSpec, ...] = ()
    servers_file: Path | None = None
    pods: PodSelector | None = None


def load_config(source: Path | str | Mapping[str, Any], environ: Mapping[str, str] | None = None) -> RouterConfig:
    """A config from a YAML file path or from data already loaded."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except OSError as err:
            raise ConfigError(f"cannot read router config {path}: {err.strerror}") from err
        except yaml.YAMLError as err:
            raise ConfigError(f"router config {path} is not valid YAML: {err}") from err
        base = path.parent
    else:
        data, base = source, Path.cwd()
    if not isinstance(data, Mapping):
        raise ConfigError(f"router config must be a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ConfigError(f"router config: unknown key {unknown[0]!r} (known: {', '.join(sorted(_KEYS))})")
    sources = [key for key in ("servers", "serversFile", "pods") if key in data]
    if len(sources) > 1:
        raise ConfigError(f"router config: give one of 'servers', 'serversFile' or 'pods', not {' and '.join(sources)}")
    servers = parse_servers(data["servers"]) if "servers" in data else ()
    servers_file = None
    if "serversFile" in data:
        if not isinstance(data["serversFile"], str):
            raise ConfigError(f"serversFile must be a path, got {data['serversFile']!r}")
        servers_file = base / data["serversFile"]
    return RouterConfig(settings=_settings(data.get("settings") or {}, environ), pipeline=load_pipeline(data.get("scheduling")),
                        servers=servers, servers_file=servers_file,
                        pods=parse_pods(data["pods"]) if "pods" in data else None)


def _settings(raw: Any, environ: Mapping[str, str] | None) -> RouterSettings:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"settings must be a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(RouterSettings)
    by_key = {camel(f.name): f.name for f in dataclasses.fields(RouterSettings) if "nested" not in f.metadata}
    overrides: dict[str, Any] = {}
    for key, value in raw.items():
        name = by_key.get(key)
        if name is None:
            raise ConfigError(f"settings: unknown key {key!r} (known: {', '.join(sorted(by_key))}; TLS and model "
                              f"signing come from the environment)")
        try:
            overrides[name] = convert(hints[name], value, f"settings: {key!r}")
        except SettingsError as err:
            raise ConfigError(str(err)) from None
    try:
        settings = from_env(RouterSettings, environ, **overrides)
    except SettingsError as err:
        raise ConfigError(str(err)) from err
    fields = {f.name: f for f in dataclasses.fields(RouterSettings)}
    for name in _POSITIVE:
        if not getattr(settings, name) > 0:  # NaN too
            raise ConfigError(f"settings: {camel(name)!r} ({fields[name].metadata['env']}) must be over 0, "
                              f"got {getattr(settings, name)!r}")
    if settings.predictor not in ("embedded", "remote", "none"):
        raise ConfigError(f"settings: 'predictor' must be 'embedded', 'remote' or 'none', got {settings.predictor!r}")
    if settings.ext_proc_body_mode not in ("full-duplex", "buffered"):
        raise ConfigError(f"settings: 'extProcBodyMode' must be 'full-duplex' or 'buffered', "
                          f"got {settings.ext_proc_body_mode!r}")
    if settings.gateway_identities.strip() and settings.tls.client_ca_file is None:
        raise ConfigError("settings: 'gatewayIdentities' (HEADROOM_ROUTER_GATEWAY_IDENTITIES) names the gateway's "
                          "client certificate, which only HEADROOM_TLS_CLIENT_CA_FILE makes ext_proc require")
    if settings.ext_proc_front not in ("native", "grpcio"):
        raise ConfigError(f"settings: 'extProcFront' must be 'native' or 'grpcio', got {settings.ext_proc_front!r}")
    return settings
