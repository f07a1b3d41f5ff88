"""Progress of long autoscaling work: ``k of N`` and an ETA, live on a terminal, as plain lines otherwise.

On a terminal, a rich progress bar redraws in place; when stdout is a file or a pipe, one line is
printed per step (at most one every ``every_s`` seconds for fine-grained steps), so logs stay readable.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class StepProgress:
    """Report ``update(done, total, label)`` calls; use as a context manager."""

    def __init__(self, console: Console, title: str, unit: str = "", every_s: float = 0.0) -> None:
        self.console, self.title, self.unit, self.every_s = console, title, unit, every_s
        self.started = time.perf_counter()
        self.last_line = -float("inf")
        self.bar: Progress | None = None
        self.task = TaskID(0)  # the bar's one task, once there is a bar

    def __enter__(self) -> StepProgress:
        if self.console.is_terminal:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn(self.unit), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                console=self.console, transient=True)
            self.bar.__enter__()
            self.task = self.bar.add_task(self.title, total=None)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def update(self, done: float, total: float, label: str = "") -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total, description=f"{self.title} {label}".strip())
            return
        now = time.perf_counter()
        if now - self.last_line < self.every_s and done < total:
            return
        self.last_line = now
        elapsed = now - self.started
        eta = f"ETA {_duration(elapsed * (total - done) / done)}" if done > 0 else "ETA unknown"
        unit = f" {self.unit}" if self.unit else ""
        print(f"{self.title}: {done:.0f} of {total:.0f}{unit}, {_duration(elapsed)} elapsed, {eta}"
              + (f" — {label}" if label else ""), flush=True)


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"
