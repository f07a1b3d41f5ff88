"""What a pick function sees: the router's view of the pool when one request arrives.

``pick(request, view)`` returns the chosen server's id, a :class:`Pick` that also carries the
predictions it used (they go into the telemetry record) and the TPOT SLO it holds the request to, a
:class:`Shed` to reject the request (the run records it as dropped with the reason), or a :class:`Hold` to keep
it at the router for now: the run asks again, oldest held request first, whenever a server has given a first
token or finished a request, and at every scrape (``view.now - request.arrival_s`` is how long it has waited). The view holds, for
each routable server ``i`` (ready, not draining), in the same order:

- ``snapshots[i]`` — the server's metrics as of the last scrape (stale by up to the scrape interval);
- ``inflight_requests[i]`` / ``inflight_prompt_tokens[i]`` — dispatched by this router and not yet
  finished (fresh: the router's own accounting); ``inflight_prefill_tokens[i]`` — the prompt tokens of
  the streaming ones among them whose first token has not arrived (prefill queued ahead);
  ``inflight_decode_tokens[i]`` — their output caps (``max_tokens``);
  ``running_tpot_slos[i]`` — the TPOT SLOs (ms) the router holds its streaming ones to;
- ``tpot_at_risk(i)`` — how many of the router's streams decoding there are behind the TPOT SLO it holds
  them to, but by little enough to be saved (:func:`contract.slo.tpot_at_risk`, from the tokens relaying
  them shows), each weighted by the chance that it ends within a few tokens (``lengths``, the router's
  record of the lengths streams completed with), computed on demand;
- ``tpot_ratios`` — how the TPOT of the router's completed streams compared with the TPOT predicted for them
  (:class:`~headroom.tpot_ratios.TpotRatios`, fed as they complete, as a router's own record is);
- ``corrections`` — how far each server's latencies have lately departed from the models' predictions
  (:class:`~feedback.latency_corrections.LatencyCorrections`, fed as requests complete, as a router's own is), and
  ``latency_correction(i)`` the log factors per target it corrects server ``i``'s predictions by now (the TTFT one
  no lower than what its latest streams say while some are late for their first tokens: ``watch``, fed as the
  router's own is), and
  ``prefill_pace(i)`` the pace server ``i`` lately went through prefill at;
- ``prefix_match(i)`` — the fraction of this request's prompt cached on the server, computed on demand.
  The simulator reads the server's actual cache at dispatch time; a real router estimates the same
  quantity from an index of its own past decisions, so this is the upper bound of that estimate — unless
  the run keeps each router's own index (``prefix_knowledge="router"``), when only the leading blocks
  this router itself sent to the server count;
- ``server_state(i)`` — all of it as the contract's :class:`~contract.server_state.ServerState`, with the
  server's step rhythm (what relaying its streams shows): what a router would have seen of the server. The
  simulated requests carry no media, so its ``encoder_matched_size`` is 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from headroom.contract.prompt import BLOCK_TOKENS
from headroom.contract.server_metrics import SCRAPED_STATE
from headroom.contract.server_state import NO_TOKEN_AGE_MS, ServerState
from headroom.contract.slo import tpot_at_risk
from headroom.contract.targets import TARGETS
from headroom.feedback.first_token_watch import FirstTokenWatch
from headroom.feedback.latency_corrections import LatencyCorrections
from headroom.output_lengths import OutputLengths
from headroom.sim.records import MetricsSnapshot
from headroom.sim.request import SimRequest
from headroom.tpot_ratios import TpotRatios

if TYPE_CHECKING:
    from headroom.sim.engine import ServerEngine


@dataclass(frozen=True, slots=True)
class Pick:
    """A routing decision with the models' predictions behind it (all optional) and the log factors per target
    (``TARGETS`` order) the router corrected them by for that server (None: not corrected)."""

    server_id: str
    predicted_ttft_ms: float | None = None
    predicted_tpot_ms: float | None = None
    predicted_e2e_ms: float | None = None
    model_versions: dict[str, int] | None = None
    tpot_slo_ms: float | None = None  # the TPOT SLO the router holds a streaming request to (None: its own)
    correction: tuple[float, ...] | None = None

    def used_tpot_ms(self) -> float | None:
        """The TPOT prediction the router judged the request by (corrected)."""
        if self.predicted_tpot_ms is None or self.correction is None:
            return self.predicted_tpot_ms
        return self.predicted_tpot_ms * math.exp(self.correction[TARGETS.index("tpot")])


@dataclass(frozen=True, slots=True)
class Shed:
    """A routing decision to reject the request, and why."""

    reason: str


@dataclass(frozen=True, slots=True)
class Hold:
    """A routing decision to keep the request at the router and decide again later, and why."""

    reason: str


class PoolView:
    """The router's view at one arrival; the runner reuses one instance and updates it in place."""

    __slots__ = ("now", "request", "snapshots", "inflight_requests", "inflight_prompt_tokens",
                 "inflight_prefill_tokens", "inflight_decode_tokens", "running_tpot_slos", "lengths", "tpot_ratios",
                 "corrections", "watch", "_engines", "_matches", "_tpot_slos", "_known", "_correction_slots", "_positions", "_corrections",
                 "_paces")

    def __init__(self) -> None:
        self.now = 0.0
        self.request: SimRequest | None = None
        self.snapshots: list[MetricsSnapshot] = []
        self.inflight_requests: list[int] = []
        self.inflight_prompt_tokens: list[int] = []
        self.inflight_prefill_tokens: list[int] = []
        self.inflight_decode_tokens: list[int] = []
        self.running_tpot_slos: list[tuple[float, ...]] = []
        self.lengths = OutputLengths()
        self.tpot_ratios = TpotRatios()
        self.corrections = LatencyCorrections()
        self.watch = FirstTokenWatch()
        self._correction_slots = np.zeros(0, dtype=np.intp)
        self._positions: dict[str, int] = {}  # server id -> its index
        self._corrections: np.ndarray | None = None  # this arrival's, once read
        self._paces: np.ndarray | None = None
        self._engines: list[ServerEngine] = []
        self._matches: list[float | None] = []
        self._tpot_slos: list[dict[str, float]] = []  # per server: request id -> the TPOT SLO it is held to
        self._known: list[set[int]] | None = None  # per server: prefix blocks this router sent there

    def __len__(self) -> int:
        return len(self.snapshots)

    def prefix_match(self, i: int) -> float:
        """Fraction (0-1) of the current request's prompt cached on server ``i``."""
        value = self._matches[i]
        if value is None:
            request = self.request
            if request is None:
                raise RuntimeError("prefix_match is asked outside a routing decision")
            value = self._engines[i].prefix_match(request)
            if self._known is not None and value > 0.0:
                value = min(value, known_prefix(request, self._known[i]))
            self._matches[i] = value
        return value

    def server_state(self, i: int, prefix_match: float | None = None) -> ServerState:
        """What a router would have seen of server ``i`` now (``prefix_match``: instead of the current
        request's)."""
        snapshot = self.snapshots[i]
        ends = self._engines[i].streamed_steps(self.now)
        if prefix_match is None:
            prefix_match = self.prefix_match(i)
        return ServerState(
            **{name: getattr(snapshot.metrics, name) for name in SCRAPED_STATE}, prefix_match=prefix_match,
            inflight_requests=self.inflight_requests[i], inflight_prompt_tokens=self.inflight_prompt_tokens[i],
            inflight_prefill_tokens=self.inflight_prefill_tokens[i],
            inflight_decode_tokens=self.inflight_decode_tokens[i],
            last_token_age_ms=min(NO_TOKEN_AGE_MS, (self.now - ends[-1]) * 1000.0) if ends else NO_TOKEN_AGE_MS,
            token_interval_ms=(ends[1] - ends[0]) * 1000.0 if len(ends) == 2 else 0.0)

    def latency_correction(self, i: int) -> tuple[float, ...]:
        """The log factors per target (``TARGETS`` order) server ``i``'s predictions are corrected by now."""
        if self._corrections is None:
            overdue = np.zeros(len(self.snapshots))
            for server_id, factor in self.watch.overdue(self.now).items():
                position = self._positions.get(server_id)  # None: no longer routable
                if position is not None:
                    overdue[position] = factor
            self._corrections = self.corrections.log_factors(self._correction_slots, self.now, overdue)
        return tuple(self._corrections[:, i].tolist())

    def prefill_pace(self, i: int) -> float:
        """Server ``i``'s prefill pace now: ms per prompt token of prefill work ahead of a first token (0: unknown)."""
        if self._paces is None:
            self._paces = self.corrections.prefill_pace(self._correction_slots, self.now)
        return float(self._paces[i])

    def tpot_at_risk(self, i: int) -> float:
        """The expected number of misses among the router's streams on server ``i`` that are at risk of missing
        their TPOT SLO now, should they get no step without a prefill before they end."""
        slos = self._tpot_slos[i]
        if not slos:
            return 0.0
        now, chance = self.now, self.lengths.end_chance
        return sum(chance(tokens) for rid, first, tokens, last in self._engines[i].stream_progress(now)
                   if rid in slos and tpot_at_risk(first, tokens, last, now, slos[rid]))

    def engines(self) -> list[ServerEngine]:
        """The simulated servers themselves, in view order — for oracles (:mod:`sim.oracle`), not routers."""
        return list(self._engines)

    def _start(self, request: SimRequest, now: float) -> None:
        self.request, self.now = request, now
        self._matches = [None] * len(self.snapshots)
        self._corrections = self._paces = None

    def _servers_changed(self) -> None:
        """The routable servers changed (``snapshots`` is the new list): their correction slots."""
        ids = [s.server_id for s in self.snapshots]
        self._correction_slots = self.corrections.slots(ids)
        self._positions = {server_id: i for i, server_id in enumerate(ids)}


def known_prefix(request: SimRequest, known: set[int]) -> float:
    """The fraction of ``request``'s prompt in its leading blocks that are in ``known``."""
    blocks = 0
    for block in request.prefix_hashes:
        if block not in known:
            break
        blocks += 1
    return min(1.0, blocks * BLOCK_TOKENS / request.prompt_tokens) if blocks else 0.0


PickResult = str | Pick | Shed | Hold
PickFunction = Callable[[SimRequest, PoolView], PickResult]
