"""What llm-d's training API takes in, and when: bounded intake, and samples the worker would refuse.

**Bounded intake.** Samples are decoded on the event loop (a bulk call holds at most 10,000) and turned into
telemetry on a thread of their own, one call at a time, so the loop keeps answering ``/healthz`` and
``/readyz`` while a flood is being ingested. At most ``max_pending`` samples wait or are being ingested, and
the telemetry producer holds at most ``buffer_records`` records the broker has not acknowledged: a call that
would go beyond either is refused with 429 and ``Retry-After`` before anything of it is taken
(:meth:`Intake.room`, :meth:`Intake.admit`), and counted — never taken and then dropped.

**Sample times.** The worker dead-letters a record that completed longer ago than its windows keep rows
(``HEADROOM_WINDOW_MAX_AGE``) or further ahead of its clock than ``HEADROOM_TELEMETRY_MAX_FUTURE_S``
(:class:`~streams.settings.RecordTimes`). llm-d's endpoint picker stamps each sample when it observes it
(the first token, or the end of the response) and sends its buffer every second, so its samples arrive a
second or two old; a sample stamped much earlier comes from elsewhere (a replay, a test client, a clock
gone wrong). :func:`refusal` refuses at once, with the reason, what the worker would refuse — older than
the windows keep rows less ``transit_s``, the time allowed for the way to the worker, or too far ahead —
so the client sees it in the answer to its call instead of losing it later in silence.

>>> times = RecordTimes(max_age_s=600.0, max_future_s=300.0)
>>> refusal(1_000.0, now=1_000.0 + 30, times=times, transit_s=60.0) is None
True
>>> refusal(1_000.0, now=1_000.0 + 570, times=times, transit_s=60.0).split(": ")[0]
'timestamp 1970-01-01T00:16:40+00:00 is 570 s old'
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from headroom.predictor.llmd_schema import iso_time
from headroom.streams.settings import RecordTimes

T = TypeVar("T")
RETRY_AFTER_S = 1  # what a refused client is told to wait: about the time one full call takes to ingest


def refusal(completion_ts: float, now: float, times: RecordTimes, transit_s: float) -> str | None:
    """Why a sample that completed at ``completion_ts`` is refused at ``now`` (None: it is taken)."""
    age = now - completion_ts
    if age > times.max_age_s - transit_s:
        return (f"timestamp {iso_time(completion_ts)} is {age:.0f} s old: the worker keeps rows {times.max_age_s:g} s "
                f"(HEADROOM_WINDOW_MAX_AGE), and a sample must reach it with {transit_s:g} s to spare")
    if -age > times.max_future_s:
        return (f"timestamp {iso_time(completion_ts)} is {-age:.0f} s ahead of this server's clock (at most "
                f"{times.max_future_s:g} s: HEADROOM_TELEMETRY_MAX_FUTURE_S)")
    return None


class Intake:
    """Admission of bulk calls, and the thread that ingests them one at a time."""

    def __init__(self, max_pending: int, buffer_records: int, buffered: Callable[[], int]) -> None:
        self.max_pending = max_pending
        self.buffer_records = buffer_records
        self.pending = 0  # samples admitted and not yet ingested
        self.refused_calls = 0  # calls answered 429
        self._buffered = buffered  # telemetry records the broker has not acknowledged yet
        self._lock = threading.Lock()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmd-intake")

    def room(self) -> bool:
        """Whether a call may be read at all: room is left for one more sample (a refusal is counted if not)."""
        return self._take(0, room=1)

    def admit(self, samples: int) -> bool:
        """Admit ``samples`` (give them back with :meth:`done`); False, and a refusal counted, when they would
        go beyond the bounds."""
        return self._take(samples, room=samples)

    def done(self, samples: int) -> None:
        with self._lock:
            self.pending -= samples

    async def run(self, work: Callable[[], T]) -> T:
        """Run ``work`` on the intake thread, after the calls admitted before it."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, work)

    def close(self) -> None:
        self._thread.shutdown(wait=True)

    def _take(self, samples: int, room: int) -> bool:
        with self._lock:
            fits = self.pending + room <= self.max_pending and \
                self._buffered() + self.pending + room <= self.buffer_records
            if fits:
                self.pending += samples
            else:
                self.refused_calls += 1
            return fits
