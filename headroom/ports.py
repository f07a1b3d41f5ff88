"""Ports for the processes that the project's commands, benchmarks and tests start on loopback.

They come from below Linux's ephemeral range (32768–60999): a port the kernel hands out for ``bind(0)`` lies in
that range, and an outgoing connection may take it between the probe that found it free and the child that
binds it. A port is handed out once per process, so two servers started together never get the same one.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence

LOW, HIGH = 20000, 32000
_given: set[int] = set()


def free_port(hosts: Sequence[str] = ("127.0.0.1",), low: int = LOW, high: int = HIGH) -> int:
    """A port in [``low``, ``high``) that every one of ``hosts`` can bind now and this process has not handed out."""
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(low, high)
        if port in _given:
            continue
        try:
            for host in hosts:
                with socket.socket() as probe:
                    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    probe.bind((host, port))
        except OSError:
            continue
        _given.add(port)
        return port
    raise RuntimeError(f"no port in [{low}, {high}) is free on all of {', '.join(hosts)}")
