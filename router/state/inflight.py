"""The router's own accounting of requests it dispatched that have not finished, per server.

Each request is tracked by id from :meth:`Inflight.start` to :meth:`Inflight.finish`; the prompt tokens of a
streaming request also count as prefill work queued on its server until :meth:`Inflight.first_token` (a
non-streaming request's first token is never seen, so it never counts there); its output cap
(``max_tokens``, 0 when it has none) counts as decode work until it finishes. Finishing twice, a second first
token, or an unknown id changes nothing, so the counts can never go negative. A request that never finishes (a
lost connection) expires ``ttl_s`` after it started. Per-server totals are kept up to date on every change, so
reading them costs nothing. Time is passed in, never read here.

The tokens of a streaming request with a TPOT SLO are followed as they are relayed (:meth:`Inflight.token`;
one relayed chunk counts as one token, :mod:`router.state.stream_table`), so :meth:`Inflight.tpot_at_risk`
can say, per server, how many of its streams are at risk of missing their TPOT SLO right now
(:func:`contract.slo.tpot_at_risk`), each weighted by the chance that it ends soon.

A stream whose first token the router will see can be started with the model's prediction of it
(``predicted_ttft_ms``): it is watched (:class:`~feedback.first_token_watch.FirstTokenWatch`, ``watch``), so that a
server whose latest streams are late for their first tokens is priced so while they wait.

A stream's first :data:`EARLY_TPOT_TOKENS` tokens after its first are timed too: :meth:`Inflight.token` says
their ms per token once they went by, so that the router learns a stream's TPOT while it runs, not at its end (a
long answer may stream for minutes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

from headroom.feedback.first_token_watch import FirstTokenWatch
from headroom.feedback.latency_corrections import EARLY_TPOT_TOKENS
from headroom.router.state.stream_table import StreamTable


@dataclass(frozen=True, slots=True)
class InflightRequest:
    request_id: str
    server_id: str
    prompt_tokens: int
    tpot_slo_ms: float | None
    started: float
    prefilling: bool = False  # streaming, no first token seen yet
    max_tokens: int = 0  # the output cap; 0 when it has none


class Relayed(NamedTuple):
    """What tokens relayed for a request say: its entry when they were its first, and its early TPOT when they
    completed it (the ms per token of its first :data:`EARLY_TPOT_TOKENS` after the first)."""
    first: InflightRequest | None
    early_tpot_ms: float | None


NOTHING = Relayed(None, None)


@dataclass(frozen=True, slots=True)
class ServerLoad:
    requests: int = 0
    prompt_tokens: int = 0
    tpot_slos_ms: tuple[float, ...] = ()
    prefill_tokens: int = 0  # prompt tokens of the streaming requests with no first token yet
    decode_tokens: int = 0  # output caps (max_tokens) of the requests


IDLE = ServerLoad()


class Inflight:
    def __init__(self, ttl_s: float = 600.0):
        self.ttl_s = ttl_s
        self._requests: dict[str, InflightRequest] = {}  # in start order
        self._load: dict[str, ServerLoad] = {}
        self._streams = StreamTable()  # the streams with a TPOT SLO, from their first token on
        self._early: dict[str, list[float] | None] = {}  # stream -> [first token's time, tokens since]; None: timed
        self.watch = FirstTokenWatch()

    def start(self, request_id: str, server_id: str, prompt_tokens: int, tpot_slo_ms: float | None,
              now: float, stream: bool = False, max_tokens: int = 0, predicted_ttft_ms: float | None = None) -> None:
        """Account a request sent to ``server_id``; a stream with ``predicted_ttft_ms`` is watched."""
        self.finish(request_id)  # a reused id replaces its earlier entry
        if stream and predicted_ttft_ms is not None:
            self.watch.dispatched(server_id, request_id, now, predicted_ttft_ms)
        entry = InflightRequest(request_id, server_id, max(0, prompt_tokens), tpot_slo_ms, now, stream,
                                max(0, max_tokens))
        self._requests[request_id] = entry
        load = self._load.get(server_id, IDLE)
        slos = load.tpot_slos_ms + (tpot_slo_ms,) if tpot_slo_ms is not None else load.tpot_slos_ms
        prefill = load.prefill_tokens + entry.prompt_tokens if stream else load.prefill_tokens
        self._load[server_id] = ServerLoad(load.requests + 1, load.prompt_tokens + entry.prompt_tokens, slos, prefill,
                                           load.decode_tokens + entry.max_tokens)

    def first_token(self, request_id: str, now: float) -> InflightRequest | None:
        """The request's first token arrived at ``now``: its prompt is no longer prefill work queued on its server."""
        entry = self._requests.get(request_id)
        if entry is None or not entry.prefilling:
            return None
        self._requests[request_id] = replace(entry, prefilling=False)
        self.watch.first_token(entry.server_id, request_id, (now - entry.started) * 1000.0)
        load = self._load[entry.server_id]
        self._load[entry.server_id] = replace(load, prefill_tokens=load.prefill_tokens - entry.prompt_tokens)
        return entry

    def token(self, request_id: str, now: float, count: int = 1) -> Relayed:
        """``count`` tokens of a streaming request were relayed at ``now``."""
        entry = self._requests.get(request_id)
        if entry is None:
            return NOTHING
        if entry.tpot_slo_ms is not None:
            self._streams.token(request_id, entry.server_id, entry.tpot_slo_ms, now, count)
        if request_id not in self._early:
            self._early[request_id] = [now, 0.0]
            return Relayed(self.first_token(request_id, now), None)
        early = self._early[request_id]
        if early is None:
            return NOTHING
        early[1] += count
        if early[1] < EARLY_TPOT_TOKENS:
            return NOTHING
        self._early[request_id] = None
        return Relayed(None, (now - early[0]) * 1000.0 / early[1])

    def early_tpot_timed(self, request_id: str) -> bool:
        """Whether :meth:`token` said the stream's early TPOT."""
        return request_id in self._early and self._early[request_id] is None

    def tpot_at_risk(self, now: float, weight: Callable[[int], float]) -> dict[str, float]:
        """Per server with any: its streams at risk of missing their TPOT SLO at ``now``, each counted as
        ``weight(tokens so far)``."""
        return self._streams.at_risk(now, weight)

    def finish(self, request_id: str) -> InflightRequest | None:
        entry = self._requests.pop(request_id, None)
        if entry is None:
            return None
        self._streams.drop(request_id)
        self._early.pop(request_id, None)
        self.watch.ended(entry.server_id, request_id)
        load = self._load[entry.server_id]
        if load.requests <= 1:
            del self._load[entry.server_id]
        else:
            slos = list(load.tpot_slos_ms)
            if entry.tpot_slo_ms is not None:
                slos.remove(entry.tpot_slo_ms)
            prefill = load.prefill_tokens - entry.prompt_tokens if entry.prefilling else load.prefill_tokens
            self._load[entry.server_id] = ServerLoad(load.requests - 1, load.prompt_tokens - entry.prompt_tokens,
                                                     tuple(slos), prefill, load.decode_tokens - entry.max_tokens)
        return entry

    def expire(self, now: float) -> list[str]:
        """Drop requests older than the TTL; returns the servers whose load changed."""
        changed = []
        for rid in [rid for rid, r in self._requests.items() if now - r.started > self.ttl_s]:
            entry = self.finish(rid)
            if entry is not None:
                changed.append(entry.server_id)
        return changed

    def load_of(self, server_id: str) -> ServerLoad:
        return self._load.get(server_id, IDLE)

    def load(self) -> dict[str, ServerLoad]:
        """Current load per server that has any in flight."""
        return dict(self._load)

    def __len__(self) -> int:
        return len(self._requests)
