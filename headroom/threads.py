"""Threaded servers and their parts: explicit start, stop, and serving until a signal.

:class:`BackgroundThread` is a part whose work runs on one daemon thread (:meth:`~BackgroundThread._run`,
which returns once ``_stop`` is set). :func:`serve_until_signal` runs a server — anything with ``wait`` and
``stop`` — until SIGTERM or SIGINT, then stops it gracefully on another thread, so the signal handler
returns at once.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Protocol, Self

log = logging.getLogger(__name__)


class BackgroundThread:
    thread_name = "background"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        raise NotImplementedError


class Server(Protocol):
    def wait(self, timeout: float | None = None) -> bool: ...

    def stop(self) -> None: ...


def serve_until_signal(server: Server, name: str) -> int:
    """Block until SIGTERM or SIGINT has stopped ``server`` (started already); returns 0."""

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %d: stopping gracefully", signum)
        threading.Thread(target=server.stop, name=f"{name}-stop").start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not server.wait(1.0):
        pass
    return 0
