"""The prediction servers a client sends to: targets resolved to instances, taken in turn, set aside on failure.

A target is ``host:port`` (one instance) or ``dns:///name:port``: every address ``name`` resolves to, as
for the headless Kubernetes Service in front of the prediction servers. Names are resolved again every
``resolve_interval_s`` on a background thread, so instances that start or stop are followed within that
interval. Each instance gets a gRPC channel of its own: handing gRPC the ``dns:///`` target itself would
give its default ``pick_first`` policy, which keeps a client on one instance.

:meth:`Instances.pick` takes the instances in turn, skipping those :meth:`~Instances.set_aside` until
their backoff ends (all set aside: the next in turn anyway). An instance that leaves DNS keeps its channel
until the next resolution, so calls already on it finish.

With TLS ``credentials``, the channel to an address resolved from ``dns:///name:port`` checks the server's
certificate against ``name`` (what the certificate of a Service's pods is issued for), not the address.
"""

from __future__ import annotations

import itertools
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from headroom.predictor.proto import prediction_pb2_grpc
from headroom.tls import channel

log = logging.getLogger(__name__)

DNS_SCHEME = "dns:///"
Lookup = Callable[[str, int], list[str]]  # (host, port) -> IP addresses


def lookup_addresses(host: str, port: int) -> list[str]:
    """The IP addresses ``host`` resolves to, in the resolver's order, without repeats."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


def split_target(target: str) -> tuple[str, int, bool]:
    """``(host, port, resolve)`` of a target; ``resolve`` for ``dns:///`` ones."""
    resolve = target.startswith(DNS_SCHEME)
    rest = target[len(DNS_SCHEME):] if resolve else target
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"prediction server target {target!r} is not host:port or dns:///name:port")
    return host.strip("[]"), int(port), resolve


def instance_address(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


@dataclass
class Instance:
    address: str
    channel: grpc.Channel
    stub: Any  # prediction_pb2_grpc.PredictionServiceStub
    down_until: float = 0.0
    calls: int = field(default=0)  # RPCs sent to it


class Instances:
    def __init__(self, targets: Sequence[str], *, channel_options: Sequence[tuple[str, Any]] = (),
                 resolve_interval_s: float = 5.0, lookup: Lookup = lookup_addresses,
                 credentials: grpc.ChannelCredentials | None = None):
        if not targets:
            raise ValueError("a prediction client needs at least one prediction server target")
        self.targets = [split_target(t) for t in targets]
        self.resolve_interval_s = resolve_interval_s
        self._lookup = lookup
        self._options = list(channel_options)
        self._credentials = credentials
        self._by_address: dict[str, Instance] = {}
        self.current: tuple[Instance, ...] = ()
        self._leaving: list[Instance] = []  # out of DNS; closed at the next resolution
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.refresh()
        self._resolver: threading.Thread | None = None
        if any(resolve for _, _, resolve in self.targets):
            self._resolver = threading.Thread(target=self._resolve_forever, name="predictor-resolver", daemon=True)
            self._resolver.start()

    def refresh(self) -> None:
        """Resolve the targets now; instances that appeared get a channel, those that left are retired."""
        names: dict[str, str | None] = {}  # address -> the name its certificate is checked against
        for host, port, resolve in self.targets:
            if not resolve:
                names.setdefault(instance_address(host, port), None)
                continue
            try:
                resolved = [instance_address(ip, port) for ip in self._lookup(host, port)]
            except OSError as err:  # keep what was resolved before
                log.warning("cannot resolve prediction servers %s:%d: %s", host, port, err)
                resolved = [i.address for i in self.current if i.address.endswith(f":{port}")]
            for address in resolved:
                names.setdefault(address, host)
        addresses = list(names)
        with self._lock:
            for instance in self._leaving:
                instance.channel.close()
            self._leaving = [i for a, i in self._by_address.items() if a not in addresses]
            for address in addresses:
                if address not in self._by_address:
                    opened = self._channel(address, names[address])
                    self._by_address[address] = Instance(
                        address, opened, prediction_pb2_grpc.PredictionServiceStub(opened))
            for instance in self._leaving:
                del self._by_address[instance.address]
            self.current = tuple(self._by_address[a] for a in addresses)

    def _channel(self, address: str, name: str | None) -> grpc.Channel:
        override = [("grpc.ssl_target_name_override", name)] if name and self._credentials else []
        return channel(address, self._credentials, self._options + override)

    def pick(self) -> Instance | None:
        """The next instance in turn that is not set aside (None when there is none at all)."""
        instances, now = self.current, time.monotonic()
        if not instances:
            return None
        turn = next(self._turn)
        for offset in range(len(instances)):
            instance = instances[(turn + offset) % len(instances)]
            if instance.down_until <= now:
                return instance
        return instances[turn % len(instances)]

    def set_aside(self, instance: Instance, seconds: float) -> None:
        instance.down_until = time.monotonic() + seconds

    def close(self) -> None:
        self._stop.set()
        if self._resolver is not None:
            self._resolver.join(5)
        with self._lock:
            for instance in (*self._by_address.values(), *self._leaving):
                instance.channel.close()
            self._by_address.clear()
            self._leaving.clear()
            self.current = ()

    def _resolve_forever(self) -> None:
        while not self._stop.wait(self.resolve_interval_s):
            self.refresh()
