"""Scrapes every server's ``/metrics`` on an interval into :class:`~router.state.pool.PoolState`.

One aiohttp session; each round fetches all servers concurrently with a per-request timeout; a failure
(connection, HTTP status, unparseable text) is recorded on the server and never stops the loop.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp

from headroom.router.state.pool import PoolState
from headroom.router.state.server_metrics import MetricsFormatError, parse_metrics
from headroom.router.state.servers import ServerSpec


class MetricsScraper:
    def __init__(self, pool: PoolState, interval_s: float = 0.05, timeout_s: float = 1.0):
        self.pool = pool
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.rounds = 0

    async def scrape_once(self, session: aiohttp.ClientSession) -> None:
        await asyncio.gather(*(self._scrape(session, spec) for spec in list(self.pool.servers.values())))
        self.rounds += 1

    async def run(self, stop: asyncio.Event) -> None:
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not stop.is_set():
                started = time.monotonic()
                await self.scrape_once(session)
                delay = max(0.0, self.interval_s - (time.monotonic() - started))
                try:
                    await asyncio.wait_for(stop.wait(), timeout=delay)
                except TimeoutError:
                    pass

    async def _scrape(self, session: aiohttp.ClientSession, spec: ServerSpec) -> None:
        try:
            async with session.get(spec.scrape_url) as response:
                if response.status != 200:
                    raise MetricsFormatError(f"HTTP {response.status}")
                text = await response.text()
            self.pool.scraped(spec.server_id, parse_metrics(text), time.monotonic())
        except (aiohttp.ClientError, TimeoutError, MetricsFormatError, UnicodeDecodeError) as err:
            self.pool.scrape_failed(spec.server_id, f"{spec.scrape_url}: {type(err).__name__}: {err}")
