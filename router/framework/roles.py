"""The scheduling vocabulary: the request, a server snapshot, a candidate with its prediction, scores,
and the role protocols plugins implement.

Plugins import only from here (and :mod:`router.framework.params`, and the column views of these values in
:mod:`router.framework.server_table` and :mod:`router.framework.candidate_set`), never from each other. Every role method is
pure: it reads its arguments and the :class:`Context` and returns a new value; randomness comes from
``context.rng`` and predictions from ``context.predictor``; no plugin reads a clock.

Role methods take any sequence of candidates. The engine passes a
:class:`~router.framework.candidate_set.CandidateSet` (columns, no object per candidate), and plugins read it as
columns with ``CandidateSet.of(candidates)``, which also turns a plain list of candidates into one, so
a plugin has one code path whoever calls it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from headroom.contract.server_state import ServerState
from headroom.contract.targets import TARGETS, response_ms
from headroom.tpot_ratios import TpotRatios

COLD_KV_USAGE = 0.02  # a server below this KV-cache usage is "cold": it has room and nothing to lose
NO_CORRECTION = (0.0,) * len(TARGETS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """What the router knows about a request when it schedules it."""

    request_id: str
    prompt_tokens: int
    max_tokens: int = 0  # the output cap; 0 when unknown
    stream: bool = False
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    priority: int = 0  # negative = sheddable
    predict: bool = True  # take the predicted-latency profile (headers decide)
    block_hashes: tuple[int, ...] = ()  # chained prompt block hashes, for prefix matching
    media_hashes: tuple[int, ...] = ()  # the distinct multimodal items, for encoder-cache matching
    holdable: bool = False  # the router can hold it and decide again later (a front that can wait)
    waited_ms: float = 0.0  # how long the router has held it so far

    @property
    def encoder_input_size(self) -> int:
        """The request's multimodal encoder input (a raw feature): how many distinct media items it carries."""
        return len(self.media_hashes)

    @property
    def has_slo(self) -> bool:
        return self.slo_ttft_ms is not None or self.slo_tpot_ms is not None

    @property
    def sheddable(self) -> bool:
        return self.priority < 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSnapshot(ServerState):
    """One candidate server at scheduling time: its raw state (the fields of
    :class:`~contract.server_state.ServerState`, from its metrics plus the router's accounting), who it is,
    and what the router knows beyond the model's inputs."""

    server_id: str
    address: str = ""
    pool_key: str = "default"
    running_tpot_slos_ms: tuple[float, ...] = ()  # TPOT SLOs of requests the router has running there
    metrics_age_s: float = 0.0  # how old the scraped metrics are
    tpot_at_risk: float = 0.0  # expected misses among its streams behind their TPOT SLO if a prefill lands there
    # per target (contract.targets.TARGETS order), the log factor its predictions are corrected by: how far its
    # latencies have lately departed from the models' (feedback.latency_corrections)
    latency_correction: tuple[float, ...] = NO_CORRECTION
    # ms its streams lately waited per prompt token of prefill work ahead of their first token (0: unknown;
    # feedback.latency_corrections): bounds a TTFT from below on queues deeper than the models were trained on
    prefill_ms_per_token: float = 0.0

    @property
    def is_idle(self) -> bool:
        return self.num_waiting == 0 and self.num_running == 0 and self.inflight_requests == 0

    @property
    def is_cold(self) -> bool:
        return self.kv_cache_usage < COLD_KV_USAGE


@dataclass(frozen=True, slots=True)
class Prediction:
    """Predicted latencies (ms) for one request on one server, the model versions that made them, and the log
    factors per target (``TARGETS`` order) the models' values were corrected by for that server."""

    ttft_ms: float
    tpot_ms: float
    e2e_ms: float | None = None
    versions: Mapping[str, int] = field(default_factory=dict, hash=False)
    correction: tuple[float, ...] = NO_CORRECTION

    def response_ms(self, stream: bool) -> float:
        """When the client's response starts (:func:`contract.targets.response_ms`)."""
        return response_ms(stream, self.ttft_ms, self.e2e_ms)

    def model_ms(self) -> dict[str, float | None]:
        """Per target, what the model predicted before the server's correction."""
        values = (self.ttft_ms, self.tpot_ms, self.e2e_ms)
        return {target: None if value is None else value / math.exp(log_factor)
                for target, value, log_factor in zip(TARGETS, values, self.correction)}



@dataclass(frozen=True, slots=True)
class Held:
    """Why the router should hold a request for now and decide again later, and for at most how much longer."""

    reason: str
    for_ms: float


@dataclass(frozen=True, slots=True)
class Candidate:
    """A server under consideration, with its prediction and headroom once the producer has run.

    ``prediction`` is None when it could not be made; ``fallback_reason`` then says why, and the engine
    scores this candidate with the heuristic profile.
    """

    server: ServerSnapshot
    prediction: Prediction | None = None
    ttft_headroom_ms: float | None = None  # SLO - predicted TTFT; None without a TTFT SLO
    tpot_headroom_ms: float | None = None  # (tightened) SLO - predicted TPOT; None unless it applies
    fallback_reason: str | None = None

    @property
    def predicted(self) -> bool:
        return self.prediction is not None

    @property
    def meets_slo(self) -> bool | None:
        """True/False when predicted against at least one SLO, None when unknown or no SLO applies."""
        ttft, tpot = self.ttft_headroom_ms, self.tpot_headroom_ms
        if self.prediction is None or (ttft is None and tpot is None):
            return None
        return (ttft is None or ttft >= 0) and (tpot is None or tpot >= 0)


@dataclass(frozen=True, slots=True)
class Scored:
    """A candidate and its score in [0, 1] (the engine's weighted, clamped sum over scorers)."""

    candidate: Candidate
    score: float


@dataclass(frozen=True, slots=True)
class PredictionBatch:
    """A predictor's answer for the rows of one feature matrix.

    ``values`` maps a target (``ttft``, ``tpot``, optionally ``e2e``) to an ``(n,)`` array in ms; ``ok``
    marks the rows whose predictions are usable; ``versions`` maps each target to its model version.
    """

    values: Mapping[str, np.ndarray]
    ok: np.ndarray
    versions: Mapping[str, int]


class LatencyPredictor(Protocol):
    """The one-method boundary to the predictor (embedded runtime or remote client).

    Raises :class:`router.errors.PredictionUnavailable` when it cannot answer for the pool at all.
    """

    def predict(self, pool_key: str, features: np.ndarray) -> PredictionBatch: ...


@dataclass(frozen=True, slots=True)
class Context:
    """What plugins may use beyond their arguments: a seedable RNG, the predictor, and how the TPOT of the streams
    the router placed compared with their predictions (its own record, updated as they complete)."""

    rng: random.Random
    predictor: LatencyPredictor | None = None
    tpot_ratios: TpotRatios | None = None


@runtime_checkable
class Producer(Protocol):
    """Attaches predictions (and headroom) to every candidate."""

    name: str

    def produce(self, request: Request, candidates: Sequence[Candidate], context: Context) -> Sequence[Candidate]: ...


@runtime_checkable
class Filter(Protocol):
    """Keeps a subset of the candidates; must never return an empty subset of a non-empty input."""

    name: str

    def filter(self, request: Request, candidates: Sequence[Candidate], context: Context) -> Sequence[Candidate]: ...


@runtime_checkable
class Holder(Protocol):
    """A filter that may also hold a ``holdable`` request at the router (every candidate after prediction)."""

    def hold(self, request: Request, candidates: Sequence[Candidate]) -> Held | None: ...


@runtime_checkable
class Scorer(Protocol):
    """Scores each candidate (one float each, in candidate order), ideally in [0, 1]; the engine clamps and
    weights."""

    name: str

    def score(self, request: Request, candidates: Sequence[Candidate]) -> Sequence[float]: ...


@runtime_checkable
class Admitter(Protocol):
    """Returns None to admit, or the reason the request is rejected."""

    name: str

    def admit(self, request: Request, candidates: Sequence[Candidate]) -> str | None: ...


@runtime_checkable
class Picker(Protocol):
    """Chooses one of the scored candidates."""

    name: str

    def pick(self, scored: Sequence[Scored], context: Context) -> Scored: ...


def role_of(plugin: object) -> str:
    """The role a plugin instance plays, by the method it defines."""
    for role, method in (("producer", "produce"), ("filter", "filter"), ("scorer", "score"),
                         ("admitter", "admit"), ("picker", "pick")):
        if callable(getattr(plugin, method, None)):
            return role
    raise TypeError(f"{type(plugin).__name__} implements no scheduling role")
