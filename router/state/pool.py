"""The pool as the router sees it: server list, latest scraped metrics, in-flight load and prefix index,
combined into one :class:`~router.roles.ServerSnapshot` per server at scheduling time.

A server is a candidate once it has been scraped successfully and for as long as its last success is at
most ``unhealthy_after_s`` old; when no server qualifies, every server is a candidate (the heuristic still
spreads load and the proxy reports connection errors). Snapshots are rebuilt for servers whose metrics or
in-flight load changed, and all of them (with the healthy set) every ``snapshot_reuse_s``, so
``metrics_age_s`` is that exact;
expired in-flight requests are swept every ``expire_every_s``. Time is passed in by the caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from router.roles import Request, ServerSnapshot
from router.state.inflight import Inflight
from router.state.prefix_index import PrefixIndex
from router.state.server_metrics import ServerMetrics
from router.state.servers import ServerSpec


@dataclass(frozen=True, slots=True)
class Scrape:
    metrics: ServerMetrics | None = None
    at: float = -math.inf  # time of the last success
    error: str | None = None  # the last failure, cleared by a success


class PoolState:
    def __init__(self, servers: tuple[ServerSpec, ...] = (), *, inflight: Inflight | None = None,
                 prefix: PrefixIndex | None = None, unhealthy_after_s: float = 5.0,
                 snapshot_reuse_s: float = 0.01, expire_every_s: float = 1.0):
        self.inflight = inflight or Inflight()
        self.prefix = prefix or PrefixIndex()
        self.unhealthy_after_s = unhealthy_after_s
        self.snapshot_reuse_s = snapshot_reuse_s  # a server's snapshot is rebuilt after this, or when it changes
        self.expire_every_s = expire_every_s
        self.servers: dict[str, ServerSpec] = {}
        self.scrapes: dict[str, Scrape] = {}
        self._list: list[ServerSnapshot] = []  # base snapshots (no prefix match) of the healthy servers
        self._position: dict[str, int] = {}
        self._built_at: float | None = None
        self._dirty: set[str] = set()
        self._next_expiry = -math.inf
        self.set_servers(servers)

    def set_servers(self, servers: tuple[ServerSpec, ...]) -> None:
        """Replace the server list; state of servers that left is dropped."""
        self.servers = {s.server_id: s for s in servers}
        for gone in set(self.scrapes) - set(self.servers):
            del self.scrapes[gone]
            self.prefix.forget(gone)
        for sid in self.servers:
            self.scrapes.setdefault(sid, Scrape())
        self._built_at = None

    def scraped(self, server_id: str, metrics: ServerMetrics, now: float) -> None:
        if server_id in self.servers:
            self.scrapes[server_id] = Scrape(metrics, now)
            self._dirty.add(server_id)

    def scrape_failed(self, server_id: str, error: str) -> None:
        if server_id in self.servers:
            last = self.scrapes[server_id]
            self.scrapes[server_id] = Scrape(last.metrics, last.at, error)

    def healthy(self, now: float) -> list[ServerSpec]:
        fresh = [s for s in self.servers.values() if now - self.scrapes[s.server_id].at <= self.unhealthy_after_s]
        return fresh or list(self.servers.values())

    def snapshots(self, request: Request, now: float) -> list[ServerSnapshot]:
        """One snapshot per candidate server for ``request``."""
        if now >= self._next_expiry:
            self._next_expiry = now + self.expire_every_s
            self._dirty.update(self.inflight.expire(now))
        if self._built_at is None or now - self._built_at > self.snapshot_reuse_s:
            specs = self.healthy(now)
            self._list = [self._build(spec, now) for spec in specs]
            self._position = {spec.server_id: i for i, spec in enumerate(specs)}
            self._built_at = now
            self._dirty.clear()
        elif self._dirty:
            for server_id in self._dirty:
                i = self._position.get(server_id)
                if i is not None:
                    self._list[i] = self._build(self.servers[server_id], now)
            self._dirty.clear()
        out = list(self._list)
        for server_id, match in self.prefix.matches(request.block_hashes, request.prompt_tokens).items():
            i = self._position.get(server_id)
            if i is not None:
                s = out[i]
                out[i] = ServerSnapshot(s.server_id, s.address, s.pool_key, s.kv_cache_usage, s.num_waiting,
                                        s.num_running, match, s.inflight_requests, s.inflight_prompt_tokens,
                                        s.running_tpot_slos_ms, s.metrics_age_s)
        return out

    def _build(self, spec: ServerSpec, now: float) -> ServerSnapshot:
        """The server's snapshot without prefix match."""
        scrape = self.scrapes[spec.server_id]
        metrics = scrape.metrics or _NO_METRICS
        mine = self.inflight.load_of(spec.server_id)
        return ServerSnapshot(
            server_id=spec.server_id, address=spec.address, pool_key=spec.pool_key,
            kv_cache_usage=metrics.kv_cache_usage, num_waiting=metrics.num_waiting, num_running=metrics.num_running,
            prefix_match=0.0, inflight_requests=mine.requests, inflight_prompt_tokens=mine.prompt_tokens,
            running_tpot_slos_ms=mine.tpot_slos_ms,
            metrics_age_s=max(0.0, now - scrape.at) if scrape.metrics else math.inf)

    def dispatched(self, request: Request, server_id: str, now: float) -> None:
        """Account a request sent to ``server_id``: in flight, and its prompt blocks cached there."""
        self.inflight.start(request.request_id, server_id, request.prompt_tokens,
                            request.slo_tpot_ms if request.stream else None, now)
        self.prefix.record(server_id, request.block_hashes)
        self._dirty.add(server_id)

    def completed(self, request_id: str) -> None:
        entry = self.inflight.finish(request_id)
        if entry is not None:
            self._dirty.add(entry.server_id)


_NO_METRICS = ServerMetrics(0.0, 0, 0)
