"""Scrapes every server's ``/metrics`` on an interval into :class:`~router.state.pool.PoolState`.

Each round fetches all servers concurrently, each within ``timeout_s``; a failure (connection, HTTP status,
unparseable text) is recorded on the server and never stops the loop. A plain ``http://`` URL is fetched on the
proxy's own HTTP client (:class:`~router.http.client.UpstreamPool`: one kept-alive connection per server,
httptools' C parser), which costs a fraction of a general client's CPU per scrape — every server is scraped
every 50 ms by default, whatever the traffic; any other URL (``https://``) goes through aiohttp.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import aiohttp

from headroom.router.http.client import UpstreamPool
from headroom.router.state.pool import PoolState
from headroom.router.state.server_metrics import MetricsFormatError, parse_metrics
from headroom.router.state.servers import ServerSpec

_HEADERS = [("accept", "text/plain")]


class MetricsScraper:
    def __init__(self, pool: PoolState, interval_s: float = 0.05, timeout_s: float = 1.0,
                 on_round: Callable[[], None] = lambda: None):
        self.pool = pool
        self.on_round = on_round  # called after each round of scrapes
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.rounds = 0
        self._plain: dict[str, tuple[str, str] | None] = {}  # scrape URL → (host:port, path) when plain HTTP
        self._client: UpstreamPool | None = None
        self._session: aiohttp.ClientSession | None = None

    async def scrape_once(self) -> None:
        await asyncio.gather(*(self._scrape(spec) for spec in list(self.pool.servers.values())))
        self.rounds += 1
        self.on_round()

    async def run(self, stop: asyncio.Event) -> None:
        # a connection idle for under one interval stays open: each server's is reused round after round
        self._client = UpstreamPool(self.timeout_s, idle_s=max(4.0, 4 * self.interval_s))
        try:
            while not stop.is_set():
                started = time.monotonic()
                await self.scrape_once()
                delay = max(0.0, self.interval_s - (time.monotonic() - started))
                try:
                    await asyncio.wait_for(stop.wait(), timeout=delay)
                except TimeoutError:
                    pass
        finally:
            self._client.close()
            if self._session is not None:
                await self._session.close()

    async def _scrape(self, spec: ServerSpec) -> None:
        url = spec.scrape_url
        try:
            async with asyncio.timeout(self.timeout_s):
                if url not in self._plain:
                    self._plain[url] = _plain_http(url)
                plain = self._plain[url]
                text = await (self._fetch(*plain) if plain is not None else self._fetch_any(url))
            self.pool.scraped(spec.server_id, parse_metrics(text), time.monotonic())
        except (OSError, aiohttp.ClientError, MetricsFormatError, UnicodeDecodeError) as err:
            self.pool.scrape_failed(spec.server_id, f"{url}: {type(err).__name__}: {err}")

    async def _fetch(self, address: str, path: str) -> str:
        if self._client is None:
            self._client = UpstreamPool(self.timeout_s)
        response = await self._client.request(address, "GET", path, _HEADERS, b"")
        try:
            if response.status != 200:
                raise MetricsFormatError(f"HTTP {response.status}")
            chunks = []
            while chunk := await response.read():
                chunks.append(chunk)
        finally:
            response.release()
        return b"".join(chunks).decode()

    async def _fetch_any(self, url: str) -> str:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        async with self._session.get(url) as response:
            if response.status != 200:
                raise MetricsFormatError(f"HTTP {response.status}")
            return await response.text()


def _plain_http(url: str) -> tuple[str, str] | None:
    """``(host:port, path)`` of a plain ``http://`` URL, else None."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{parts.port or 80}", (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
