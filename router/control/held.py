"""The requests the scheduling pipeline holds at the router, in one queue the whole pool drains.

A request predicted to miss its SLO everywhere in a burst may be held rather than sent behind one server's queue
(late-concentration-filter's ``holdCap``). Held requests wait here oldest first. Whenever the pool frees up (a
stream's first token, a completion, a round of scrapes) the oldest one is asked about again: sent, it passes the
turn to the next; held again, it keeps its place, ahead of every request held after it. Each also stops waiting
at its own deadline, when the pipeline sends it however late it is.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools


class HeldRequests:
    """The queue of held requests, in the order they were first held; every call runs on the router's event loop."""

    def __init__(self) -> None:
        self._tickets = itertools.count()
        self._order: list[int] = []  # a heap of the waiting requests' tickets
        self._turns: dict[int, asyncio.Future[None]] = {}  # ticket -> its turn, while it waits

    def __len__(self) -> int:
        return len(self._turns)

    def ticket(self) -> int:
        """A request's place in the queue, taken when it is first held and kept while it is held again."""
        return next(self._tickets)

    async def wait(self, ticket: int, for_s: float) -> None:
        """Wait for a turn (behind every request held before this one), or ``for_s`` at most."""
        turn = self._turns[ticket] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._order, ticket)
        try:
            await asyncio.wait_for(turn, max(0.0, for_s))
        except TimeoutError:
            pass
        finally:
            del self._turns[ticket]  # its ticket left in the heap is skipped by wake()

    def wake(self) -> None:
        """The pool freed up: the oldest held request is asked about again."""
        order, turns = self._order, self._turns
        while order:
            turn = turns.get(heapq.heappop(order))
            if turn is not None and not turn.done():
                turn.set_result(None)
                return
