"""Everything the demo needs, checked before it starts anything (in well under a second): the trace its
load comes from, Java for the broker, the broker's jars (or Maven to fetch them), free ports, and folders it
can write. Every problem is reported at once, each saying what is missing and where to get it.
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterable
from pathlib import Path

from headroom.localkafka import jars
from headroom.localkafka.errors import BrokerError
from headroom.localkafka.settings import BrokerSettings
from headroom.sim.traces import TraceError, TraceSettings


def problems(traces: TraceSettings, broker: BrokerSettings, ports: Iterable[int], folders: Iterable[Path]) -> list[str]:
    """What stands in the demo's way; empty when it can start."""
    found = []
    try:
        traces.path("azure")
    except TraceError as err:
        found.append(str(err))
    try:
        jars.java_command()
    except BrokerError as err:
        found.append(str(err))
    found += _broker_jars(broker)
    busy = [port for port in ports if not _free(port)]
    if busy:
        found.append(f"port(s) {', '.join(map(str, busy))} on 127.0.0.1 are in use (by an earlier demo or another "
                     f"program?); choose others with HEADROOM_DEMO_BASE_PORT, HEADROOM_KAFKA_PORT and "
                     f"HEADROOM_KAFKA_CONTROLLER_PORT")
    found += [f"cannot write to {folder}: {reason}" for folder in folders if (reason := _unwritable(folder))]
    return found


def _broker_jars(broker: BrokerSettings) -> list[str]:
    try:
        cached = (broker.jar_cache / jars.kafka_version(broker) / "lib" / ".complete").exists()
    except (OSError, BrokerError) as err:
        return [f"the broker's files in {broker.infra_dir} cannot be read: {err}"]
    if cached or shutil.which("mvn"):
        return []
    return [f"the Kafka broker's jars are not in {broker.jar_cache} and Maven (mvn), which fetches them once from "
            f"Maven Central, is not on PATH: install it (e.g. apt-get install maven)"]


def _free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _unwritable(folder: Path) -> str | None:
    """Why ``folder`` (or the nearest folder above it that exists) cannot be written, or None."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a folder"
    return None if os.access(existing, os.W_OK | os.X_OK) else f"{existing} is not writable"
