"""The pool as the router sees it: server list, latest scraped metrics, in-flight load and prefix index,
combined into one :class:`~router.framework.server_table.ServerTable` of candidates at scheduling time (with the
encoder index: which of the request's media items each server likely holds).

A server is a candidate once it has been scraped successfully and for as long as its last success is at
most ``unhealthy_after_s`` old, unless passive outlier detection (:mod:`router.state.outliers`, fed by
:meth:`PoolState.upstream_failed`) ejected it; when no server qualifies, every server is a candidate (the
heuristic still spreads load and the proxy reports connection errors). A retry names the servers it
already tried, which are never candidates again for it. Per-server state is kept as columns, updated in
place when a scrape lands or the in-flight load changes, so a decision copies columns instead of building
an object per server; ``metrics_age_s`` is computed at the decision's time, and so are the age of the last
token each server streamed through the router (its step rhythm, from :meth:`PoolState.token_seen`) and how
many of its streams are at risk of missing their TPOT SLO (from :meth:`PoolState.token`), each weighted by
the chance that it ends within a few tokens, from the lengths of the streams that completed (``lengths``). How the
TPOT of completed streams compared with their predictions is kept per pool in ``tpot_ratios``, and how far each
server's latencies have lately departed from the models' in ``corrections`` (each candidate's
``latency_correction`` and ``prefill_ms_per_token``, faded to the decision's time; its TTFT factor no lower than
what its latest streams say while some are late for their first tokens, ``inflight.watch``). Expired in-flight requests are swept every ``expire_every_s``. Time is passed in by the caller.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from headroom.contract.server_metrics import SCRAPED_STATE, ServerMetrics
from headroom.contract.server_state import NO_TOKEN_AGE_MS, SERVER_FIELDS
from headroom.contract.targets import TARGETS
from headroom.feedback.latency_corrections import LatencyCorrections
from headroom.output_lengths import OutputLengths
from headroom.router.framework.roles import Request, ServerSnapshot
from headroom.router.framework.server_table import ServerTable
from headroom.router.state.encoder_index import EncoderIndex
from headroom.router.state.inflight import Inflight, Relayed
from headroom.router.state.outliers import OutlierPolicy, Outliers
from headroom.router.state.prefix_index import PrefixIndex
from headroom.router.state.servers import ServerSpec
from headroom.tpot_ratios import TpotRatios

STEP_GAP_S = 0.001  # tokens closer than this together came out of the same batch step


class Finished(NamedTuple):
    """What :meth:`PoolState.completed` says of a request that finished."""
    first_unseen: bool  # possibly a stream whose first token went by unseen
    early_tpot_timed: bool  # its early TPOT went by (:meth:`PoolState.token`)


@dataclass(frozen=True, slots=True)
class Scrape:
    metrics: ServerMetrics | None = None
    at: float = -math.inf  # time of the last success
    error: str | None = None  # the last failure, cleared by a success


class PoolState:
    def __init__(self, servers: tuple[ServerSpec, ...] = (), *, inflight: Inflight | None = None,
                 prefix: PrefixIndex | None = None, encoder: EncoderIndex | None = None,
                 unhealthy_after_s: float = 5.0, expire_every_s: float = 1.0, outliers: OutlierPolicy | None = None):
        self.inflight = inflight or Inflight()
        self.outliers = Outliers(outliers or OutlierPolicy())
        self.lengths = OutputLengths()
        self.tpot_ratios = TpotRatios()
        self.corrections = LatencyCorrections()
        self.prefix = prefix or PrefixIndex()
        self.encoder = encoder or EncoderIndex()
        self.unhealthy_after_s = unhealthy_after_s
        self.expire_every_s = expire_every_s
        self.servers: dict[str, ServerSpec] = {}
        self.scrapes: dict[str, Scrape] = {}
        self._next_expiry = -math.inf
        self._position: dict[str, int] = {}
        self._last_token, self._token_interval = np.zeros(0), np.zeros(0)  # per server, in position order
        self._last_success = np.zeros(0)
        self.set_servers(servers)

    def set_servers(self, servers: tuple[ServerSpec, ...]) -> None:
        """Replace the server list; state of servers that left is dropped."""
        self.servers = {s.server_id: s for s in servers}
        for gone in set(self.scrapes) - set(self.servers):
            del self.scrapes[gone]
            self.prefix.forget(gone)
            self.encoder.forget(gone)
            self.outliers.forget(gone)
            self.corrections.forget(gone)
            self.inflight.watch.forget(gone)
        for sid in self.servers:
            self.scrapes.setdefault(sid, Scrape())
        ids = tuple(self.servers)
        n = len(ids)
        rhythm = {sid: (self._last_token[i], self._token_interval[i], self._last_success[i])
                  for sid, i in self._position.items()}
        self._ids = ids
        self._addresses = tuple(s.address for s in self.servers.values())
        self._pools = tuple(s.pool_key for s in self.servers.values())
        self._position = {sid: i for i, sid in enumerate(ids)}
        self._correction_slots = self.corrections.slots(ids)
        self._prefix_bits = self.prefix.bits(ids)
        self._scraped = {name: np.zeros(n) for name in SCRAPED_STATE}
        self._scraped_at = np.full(n, -math.inf)
        self._ejected_until = np.array([self.outliers.until(sid) for sid in ids], dtype=float)
        self._health_bounds: tuple[float, float] | None = None  # (oldest scrape, last ejection's end); None: stale
        self._inflight_requests, self._inflight_tokens, self._prefill_tokens = np.zeros(n), np.zeros(n), np.zeros(n)
        self._decode_tokens = np.zeros(n)
        self._last_token, self._token_interval = np.full(n, -math.inf), np.zeros(n)
        self._last_success = np.full(n, -math.inf)
        for sid, (last, interval, success) in rhythm.items():  # servers that stay keep the step rhythm seen
            if sid in self._position:
                i = self._position[sid]
                self._last_token[i], self._token_interval[i], self._last_success[i] = last, interval, success
        self._tightest_tpot_slo = np.full(n, math.nan)
        self._tpot_slos: list[tuple[float, ...]] = [()] * n
        for sid in ids:
            scrape = self.scrapes[sid]
            if scrape.metrics is not None:
                self._store_metrics(sid, scrape.metrics, scrape.at)
            self._store_load(sid)

    def scraped(self, server_id: str, metrics: ServerMetrics, now: float) -> None:
        if server_id in self.servers:
            self.scrapes[server_id] = Scrape(metrics, now)
            self._store_metrics(server_id, metrics, now)

    def scrape_failed(self, server_id: str, error: str) -> None:
        if server_id in self.servers:
            last = self.scrapes[server_id]
            self.scrapes[server_id] = Scrape(last.metrics, last.at, error)

    def snapshots(self, request: Request, now: float, exclude: frozenset[str] = frozenset()) -> ServerTable:
        """The candidate servers for ``request``, one row each (a sequence of snapshots), none of ``exclude``."""
        if now >= self._next_expiry:
            self._next_expiry = now + self.expire_every_s
            for server_id in self.inflight.expire(now):
                self._store_load(server_id)
        prefix = self.prefix.fractions(request.block_hashes, request.prompt_tokens)
        rows = self._candidate_rows(now, exclude)
        picked = None if rows is None else rows.tolist()

        def column(values: np.ndarray) -> np.ndarray:  # always a copy: the table is a value
            return values.copy() if rows is None else values[rows]

        def names(values: Sequence[Any]) -> tuple[Any, ...]:
            return tuple(values) if picked is None else tuple(values[i] for i in picked)

        measured = {  # each field of contract.server_state.ServerState
            **{name: column(values) for name, values in self._scraped.items()},
            "prefix_match": prefix[column(self._prefix_bits)],
            "inflight_requests": column(self._inflight_requests),
            "inflight_prompt_tokens": column(self._inflight_tokens),
            "inflight_prefill_tokens": column(self._prefill_tokens),
            "last_token_age_ms": np.minimum(NO_TOKEN_AGE_MS, 1000.0 * (now - column(self._last_token))),
            "token_interval_ms": column(self._token_interval),
            "inflight_decode_tokens": column(self._decode_tokens),
            "encoder_matched_size": self.encoder.matched(request.media_hashes, names(self._ids))}
        state = {name: measured[name] for name in SERVER_FIELDS}  # in the declared order
        slots = self._correction_slots if rows is None else self._correction_slots[rows]
        return ServerTable(
            server_id=names(self._ids), address=names(self._addresses), pool_key=names(self._pools), state=state,
            running_tpot_slos_ms=names(self._tpot_slos), tightest_tpot_slo_ms=column(self._tightest_tpot_slo),
            metrics_age_s=np.maximum(0.0, now - column(self._scraped_at)),  # never scraped: inf
            tpot_at_risk=column(self._at_risk(now)),
            latency_correction=self.corrections.log_factors(slots, now, column(self._overdue(now))),
            prefill_ms_per_token=self.corrections.prefill_pace(slots, now))

    def with_corrections(self, servers: Sequence[ServerSnapshot], now: float) -> ServerTable:
        """A caller's candidate ``servers`` with the corrections and prefill paces this router learned for them (by
        server id)."""
        table = ServerTable.of(servers)
        return table.with_correction(self.corrections.log_factors_of(table.server_id, now),
                                     self.corrections.prefill_pace_of(table.server_id, now))

    def latency_corrections(self, now: float) -> Iterator[tuple[str, str, float]]:
        """``(server id, target, factor)`` of every server: what its predictions are multiplied by at ``now``."""
        factors = np.exp(self.corrections.log_factors(self._correction_slots, now, self._overdue(now)))
        for t, target in enumerate(TARGETS):
            for i, server_id in enumerate(self._ids):
                yield server_id, target, float(factors[t, i])

    def dispatched(self, request: Request, server_id: str, now: float, key: str | None = None,
                   predicted_ttft_ms: float | None = None) -> None:
        """Account a request sent to ``server_id``: in flight (under ``key``, the request id by default; a stream
        whose first token :meth:`token` will see is watched for it, with the model's ``predicted_ttft_ms``), and
        its prompt blocks cached there."""
        self.inflight.start(key or request.request_id, server_id, request.prompt_tokens,
                            request.slo_tpot_ms if request.stream else None, now, request.stream, request.max_tokens,
                            predicted_ttft_ms)
        self.prefix.record(server_id, request.block_hashes)
        self.encoder.record(server_id, request.media_hashes)
        self._store_load(server_id)

    def token_seen(self, server_id: str, now: float) -> None:
        """A token streamed from ``server_id`` went by: the server's step rhythm. Tokens less than
        ``STEP_GAP_S`` apart came out of one batch step."""
        i = self._position.get(server_id)
        if i is None:
            return
        elapsed = now - self._last_token[i]
        if STEP_GAP_S <= elapsed < NO_TOKEN_AGE_MS / 1000.0:
            self._token_interval[i] = elapsed * 1000.0
        elif elapsed >= NO_TOKEN_AGE_MS / 1000.0:
            self._token_interval[i] = 0.0  # the last one was too long ago to say anything of this step
        self._last_token[i] = now

    def token(self, key: str, now: float, count: int = 1) -> Relayed:
        """``count`` tokens of the request dispatched under ``key`` were relayed at ``now`` (the first one ends its
        prefill): whether they were its first, and its early TPOT when they completed it."""
        relayed = self.inflight.token(key, now, count)
        if relayed.first is not None:
            self._store_load(relayed.first.server_id)
        return relayed

    def _at_risk(self, now: float) -> np.ndarray:
        """Per server, the expected number of its streams at risk that end soon (:meth:`token`, ``lengths``)."""
        return self._column(self.inflight.tpot_at_risk(now, self.lengths.end_chance))

    def _overdue(self, now: float) -> np.ndarray:
        """Per server, the least its TTFT log factor can be, from its latest streams while some are late for their
        first tokens (:meth:`FirstTokenWatch.overdue`)."""
        return self._column(self.inflight.watch.overdue(now))

    def _column(self, values: dict[str, float]) -> np.ndarray:
        """``values`` by server id as a column in position order (0 for the servers without one)."""
        column = np.zeros(len(self._ids))
        for server_id, value in values.items():
            i = self._position.get(server_id)
            if i is not None:
                column[i] = value
        return column

    def completed(self, key: str, output_tokens: int = 0) -> Finished:
        """A request finished (``output_tokens`` when it completed: its length tells when streams end): whether it
        may have been a stream whose first token :meth:`token` never saw (an unknown or expired key may), and
        whether :meth:`token` said its early TPOT."""
        self.lengths.add(output_tokens)
        timed = self.inflight.early_tpot_timed(key)
        entry = self.inflight.finish(key)
        if entry is None:
            return Finished(True, False)
        self._store_load(entry.server_id)
        return Finished(entry.prefilling, timed)

    def upstream_failed(self, server_id: str, now: float) -> float | None:
        """A request sent to ``server_id`` failed; the end of its ejection if that ejected it, else None."""
        until = self.outliers.failed(server_id, now, len(self.servers)) if server_id in self.servers else None
        if until is not None:
            self._ejected_until[self._position[server_id]] = until
            self._health_bounds = None
        return until

    def upstream_succeeded(self, server_id: str, now: float) -> None:
        self.outliers.succeeded(server_id)
        i = self._position.get(server_id)
        if i is not None:
            self._last_success[i] = now

    def idle_s(self, server_id: str, now: float) -> float:
        """Seconds since ``server_id`` last made progress the router saw (a token relayed, a request answered); inf
        when never: a server busy with other requests is not hanging."""
        i = self._position.get(server_id)
        return math.inf if i is None else now - max(self._last_token[i], self._last_success[i])

    def _candidate_rows(self, now: float, exclude: frozenset[str]) -> np.ndarray | None:
        """Row numbers of the candidate servers; None when that is every server."""
        if self._health_bounds is None:  # kept from one scrape or ejection to the next
            self._health_bounds = (float(self._scraped_at.min(initial=math.inf)),
                                   float(self._ejected_until.max(initial=-math.inf)))
        oldest, ejected = self._health_bounds
        if not exclude and now - oldest <= self.unhealthy_after_s and ejected <= now and len(self._ids):
            return None  # every server healthy: each one's scrape is at most as old as the oldest
        healthy = (now - self._scraped_at <= self.unhealthy_after_s) & (self._ejected_until <= now)
        allowed = None
        if exclude:
            allowed = np.ones(len(self._ids), dtype=bool)
            allowed[[self._position[sid] for sid in exclude if sid in self._position]] = False
            healthy &= allowed
        if healthy.any():
            return None if healthy.all() else np.flatnonzero(healthy)
        return None if allowed is None else np.flatnonzero(allowed)

    def _store_metrics(self, server_id: str, metrics: ServerMetrics, at: float) -> None:
        i = self._position[server_id]
        for name, values in self._scraped.items():
            values[i] = getattr(metrics, name)
        bounds = self._health_bounds
        if bounds is not None and not (self._scraped_at[i] > bounds[0] <= at):  # it was (or is now) the oldest
            self._health_bounds = None
        self._scraped_at[i] = at

    def _store_load(self, server_id: str) -> None:
        i = self._position.get(server_id)
        if i is None:
            return
        load = self.inflight.load_of(server_id)
        self._inflight_requests[i], self._inflight_tokens[i] = load.requests, load.prompt_tokens
        self._prefill_tokens[i], self._decode_tokens[i] = load.prefill_tokens, load.decode_tokens
        self._tpot_slos[i] = load.tpot_slos_ms
        self._tightest_tpot_slo[i] = min(load.tpot_slos_ms, default=math.nan)
