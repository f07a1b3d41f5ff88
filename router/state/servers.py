"""The servers the router may pick: from static config, or from a YAML/JSON file that may change.

A server entry is ``{id, address, pool, metricsUrl, namespace, pod}``; ``address`` is ``host:port`` of its
OpenAI-compatible API, ``pool`` defaults to ``default`` and ``metricsUrl`` to ``http://ADDRESS/metrics``;
``namespace`` and ``pod`` name the Kubernetes pod behind it, when known (the autoscaling signals carry them).
A server file holds ``{servers: [entry, ...]}``. :class:`ServerFile` rereads it when its modification time
or size changes; a broken file keeps the previous list and reports the error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from headroom.router.errors import ConfigError


@dataclass(frozen=True, slots=True)
class ServerSpec:
    server_id: str
    address: str
    pool_key: str = "default"
    metrics_url: str = ""
    namespace: str = ""  # the pod serving it, when known
    pod: str = ""

    @property
    def scrape_url(self) -> str:
        return self.metrics_url or f"http://{self.address}/metrics"


def parse_servers(entries: Any, where: str = "servers") -> tuple[ServerSpec, ...]:
    """Server specs from config data, with precise errors."""
    if not isinstance(entries, list):
        raise ConfigError(f"{where} must be a list, got {type(entries).__name__}")
    specs: dict[str, ServerSpec] = {}
    for i, entry in enumerate(entries):
        at = f"{where}[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{at} must be a mapping, got {type(entry).__name__}")
        unknown = sorted(set(entry) - {"id", "address", "pool", "metricsUrl", "namespace", "pod"})
        if unknown:
            raise ConfigError(f"{at}: unknown key {unknown[0]!r} "
                              f"(known: address, id, metricsUrl, namespace, pod, pool)")
        address = entry.get("address")
        if not isinstance(address, str) or ":" not in address:
            raise ConfigError(f"{at}: address must be 'host:port', got {address!r}")
        server_id = entry.get("id", address)
        for key, value in (("id", server_id), ("pool", entry.get("pool", "default")),
                           ("metricsUrl", entry.get("metricsUrl", "")), ("namespace", entry.get("namespace", "")),
                           ("pod", entry.get("pod", ""))):
            if not isinstance(value, str):
                raise ConfigError(f"{at}: {key} must be a string, got {value!r}")
        if server_id in specs:
            raise ConfigError(f"{at}: duplicate server id {server_id!r}")
        specs[server_id] = ServerSpec(server_id, address, entry.get("pool", "default"), entry.get("metricsUrl", ""),
                                      entry.get("namespace", ""), entry.get("pod", ""))
    return tuple(specs.values())


class ServerFile:
    """A server list in a file, reread when it changes."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._stamp: tuple[int, int] | None = None
        self.servers: tuple[ServerSpec, ...] = ()
        self.last_error: str | None = None
        self.refresh()

    def refresh(self) -> bool:
        """Reread the file if it changed; returns True when the server list changed."""
        try:
            stat = os.stat(self.path)
        except OSError as err:
            self.last_error = f"server file {self.path}: {err.strerror}"
            return False
        stamp = (stat.st_mtime_ns, stat.st_size)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            data = yaml.safe_load(self.path.read_text()) or {}
            if not isinstance(data, Mapping) or "servers" not in data:
                raise ConfigError(f"server file {self.path} must hold a mapping with a 'servers' list")
            servers = parse_servers(data["servers"], f"{self.path}: servers")
        except (yaml.YAMLError, ConfigError, OSError) as err:
            self.last_error = str(err)
            return False
        self.last_error = None
        changed = servers != self.servers
        self.servers = servers
        return changed

