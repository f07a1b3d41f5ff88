"""A log line for an event that may recur many times a second: written at most once per interval, saying
how often the event happened since the last line.

>>> import logging
>>> clock = iter([0.0, 1.0, 2.0, 11.0]).__next__
>>> throttled = ThrottledLog(logging.getLogger("example"), interval_s=10.0, clock=clock)
>>> [throttled.event(logging.WARNING, "telemetry dropped") for _ in range(4)]
[True, False, False, True]
>>> throttled.total
4
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class ThrottledLog:
    def __init__(self, logger: logging.Logger, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.total = 0  # events seen
        self._clock = clock
        self._last = -float("inf")
        self._since = 0  # events since the last line

    def event(self, level: int, message: str, *args: object) -> bool:
        """Count one event; log ``message`` (with ``args``) if the last line is ``interval_s`` old. True when logged."""
        self.total += 1
        self._since += 1
        now = self._clock()
        if now - self._last < self.interval_s:
            return False
        self.logger.log(level, message + " (%d time(s) since the last such line)", *args, self._since)
        self._last, self._since = now, 0
        return True
