"""Starting headroom's components as real processes, waiting until each is ready, and stopping them all.

A :class:`Supervisor` owns every process it starts (each in its own process group, so a Ctrl-C in the
terminal reaches the demo alone, output to a log file). :meth:`Supervisor.start_all` starts several at
once and says when each becomes ready; ``stop()`` sends SIGTERM, waits a grace period, then SIGKILLs what
is left — so nothing outlives the demo, also on Ctrl-C or an error.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from headroom.errors import HeadroomError

GRACE_S = 15.0


class ComponentFailed(HeadroomError, RuntimeError):
    """A component exited or did not become ready; the message carries its log tail."""


@dataclass
class Component:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    started: float = 0.0  # monotonic

    def tail(self, lines: int = 25) -> str:
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(text[-lines:]) or "(no output)"


@dataclass
class Supervisor:
    log_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    components: list[Component] = field(default_factory=list)

    def start(self, name: str, args: list[str], ready: Callable[[], bool], timeout_s: float = 90.0) -> Component:
        """Run ``headroom <args>`` as ``name`` and wait until ``ready()`` is true."""
        self.start_all([(name, args, ready)], timeout_s=timeout_s)
        return self.components[-1]

    def start_all(self, specs: list[tuple[str, list[str], Callable[[], bool]]], timeout_s: float = 90.0,
                  on_ready: Callable[[Component, float], None] | None = None) -> None:
        """Run each ``(name, args, ready)`` at once; ``on_ready(component, seconds)`` as each becomes ready."""
        waiting = [(self._launch(name, args), ready) for name, args, ready in specs]
        deadline = time.monotonic() + timeout_s
        while waiting:
            for component, ready in list(waiting):
                if component.process.poll() is not None:
                    raise ComponentFailed(f"{component.name} exited with code {component.process.returncode}:\n"
                                          f"{component.tail()}")
                try:
                    if not ready():
                        continue
                except OSError:
                    continue
                waiting.remove((component, ready))
                if on_ready:
                    on_ready(component, time.monotonic() - component.started)
            if waiting and time.monotonic() > deadline:
                late = waiting[0][0]
                raise ComponentFailed(f"{late.name} was not ready within {timeout_s:.0f} s:\n{late.tail()}")
            if waiting:
                time.sleep(0.1)

    def _launch(self, name: str, args: list[str]) -> Component:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"{re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-')}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen([sys.executable, "-m", "headroom.cli.main", *args], stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env={**os.environ, **self.env}, start_new_session=True)
        component = Component(name, process, log, time.monotonic())
        self.components.append(component)
        return component

    def check(self) -> None:
        """Raise if a component has died."""
        for component in self.components:
            if component.process.poll() is not None:
                raise ComponentFailed(f"{component.name} exited with code {component.process.returncode}:\n"
                                      f"{component.tail()}")

    def stop(self) -> list[str]:
        """Stop every component, newest first; returns the names that needed SIGKILL."""
        killed = []
        for component in reversed(self.components):
            _signal(component.process, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_S
        for component in reversed(self.components):
            try:
                component.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(component.process, signal.SIGKILL)
                component.process.wait()
                killed.append(component.name)
        self.components.clear()
        return killed


def _signal(process: subprocess.Popen[bytes], sig: int) -> None:
    if process.poll() is None:
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass
