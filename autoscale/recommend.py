"""Search HPA configurations on a trace and recommend the cheapest one that meets a latency SLO.

Every candidate is built in the form it will be emitted — the chosen pipeline's metric names and, for
KEDA, the ScaledObject's queries (:mod:`autoscale.pipelines`) — and evaluated in that form, so the
emitted files replayed by ``simulate`` with the same settings give the same figures. Steps:

1. **Warm start** — the smallest fixed pool that meets the TTFT SLO on the trace's first
   ``warmup_s`` seconds; every closed-loop run starts at that size, as a pool already in service does. The
   written autoscaler carries it (:data:`~autoscale.manifest.INITIAL_REPLICAS`, an annotation ``simulate`` starts
   from; the user scales the Deployment to it before applying), and the
   chosen one is also replayed from its ``minReplicas`` (:attr:`Recommendation.cold`), so the user knows what
   applying it to a smaller Deployment costs. When that smallest pool is the minimum asked for and carries
   the whole trace within the SLO, nothing needs to scale and the search stops there
   (:attr:`Recommendation.fixed`).
2. **Seeds** — per signal the model server really exports (:mod:`autoscale.servers`), targets around an
   analytic seed: for the queue, the number of queued requests one prefill each can wait through
   within half the TTFT SLO (``SLO / 2 / prefill_ms``), plus the guide's 3 and 5; for batch size and
   slots, Little's law (``λ · mean E2E / servers``) plus the guide's "just below" a full batch; memory
   and the predicted-TTFT/SLO ratio on fixed grids.
3. **Stage 1** — every target with Kubernetes' default behavior, spelled out in ``behavior`` so the
   emitted manifest is complete (scale-up +4 pods or +100 % per 15 s, scale-down window 300 s); then
   ``refinements`` bisection steps between the highest passing target and the next failing one.
4. **Stage 2** — each signal's best target with tuned behaviors (shorter scale-down window, scale-up
   paced by the model load time), and a tighter scale-up tolerance where the target cluster honours
   ``behavior.*.tolerance`` (:mod:`autoscale.versions`).

A run meets the SLO when its TTFT p99 (and TPOT p99, if given) are within the limits; the cheapest such
run (replica-hours) wins; runs within 1 % of its cost are tie-broken by fewer traps, then attainment.
Dropped requests count as misses. When no run rescaled, the cheapest passing run never rescaled, or every run
cost the same within 1 %, the trace never exercised scaling: :attr:`Recommendation.exercised` is false and no
configuration is chosen. When no run meets the SLO, a fixed pool of ``max_replicas`` is replayed too
(:attr:`Recommendation.ceiling`): whether more replicas, or a faster autoscaler, could meet it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import xgboost as xgb

from headroom.autoscale.closed_loop import LoopResult, LoopSettings, run_closed_loop
from headroom.autoscale.documents import Autoscaler
from headroom.autoscale.learned import learn_ttft_model
from headroom.autoscale.pipelines import Pipeline, Workload, hpa_metric, series_query
from headroom.autoscale.promql import parse_query
from headroom.autoscale.spec import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    Behavior,
    HpaSpec,
    PolicyType,
    ScaleTargetRef,
    ScalingPolicy,
    ScalingRules,
)
from headroom.autoscale.traps import Trap, find_traps
from headroom.autoscale.versions import tolerance_honored
from headroom.contract.prompt import BLOCK_TOKENS
from headroom.contract.scaling_signals import Signal
from headroom.sim.policies import policy
from headroom.sim.pool import run, uniform_pool
from headroom.sim.profile import KV_BYTES_PER_TOKEN
from headroom.sim.request import SimRequest
from headroom.sim.results import quantile

GIB = 2**30
COST_NOISE = 0.01  # replica-hours within 1 % are a tie


@dataclass(frozen=True)
class Slo:
    ttft_p99_ms: float
    tpot_p99_ms: float | None = None


@dataclass(frozen=True)
class Goal:
    """What to recommend for: the SLO, the replica range, the metric pipeline and where the pool runs."""

    slo: Slo
    min_replicas: int = 1
    max_replicas: int = 10
    pipeline: Pipeline = Pipeline.GMP
    workload: Workload = Workload()
    router_signals: bool = True
    kubernetes_version: str | None = None


@dataclass(frozen=True)
class HpaCandidate:
    signal: Signal
    target: float  # in the signal's unit (bytes for accelerator memory)
    behavior: str
    autoscaler: Autoscaler

    @property
    def spec(self) -> HpaSpec:
        return self.autoscaler.spec

    @property
    def target_text(self) -> str:
        return f"{self.target / GIB:g}Gi" if self.signal is Signal.HBM_USED_BYTES else f"{self.target:g}"


@dataclass(frozen=True)
class Evaluation:
    candidate: HpaCandidate
    replica_hours: float
    ttft_p99_ms: float
    tpot_p99_ms: float
    attainment: float
    rescales: int
    meets: bool
    result: LoopResult
    traps: int = 0


@dataclass(frozen=True)
class FixedPool:
    """A pool of ``replicas`` servers that never scales, replayed on the whole trace."""

    replicas: int
    ttft_p99_ms: float
    attainment: float
    meets: bool


@dataclass(frozen=True)
class Recommendation:
    best: Evaluation | None
    evaluations: tuple[Evaluation, ...]
    settings: LoopSettings  # what every run used: what ``simulate`` must be given besides the written file
    traps: tuple[Trap, ...]
    exercised: bool = True
    warm_replicas: int = 1  # serving when every run starts (the written autoscaler's INITIAL_REPLICAS)
    cold: Evaluation | None = None  # the chosen autoscaler started from its minReplicas, when that is fewer
    fixed: FixedPool | None = None  # the minimum, fixed: it met the SLO on the whole trace, nothing scales
    ceiling: FixedPool | None = None  # max_replicas, fixed, when no autoscaler met the SLO

    def ranked(self) -> list[Evaluation]:
        """Passing runs by cost, then failing ones by attainment."""
        passing = sorted((e for e in self.evaluations if e.meets), key=lambda e: (e.replica_hours, -e.attainment))
        failing = sorted((e for e in self.evaluations if not e.meets), key=lambda e: -e.attainment)
        return passing + failing


def warm_replicas(requests: Sequence[SimRequest], slo: Slo, settings: LoopSettings, min_replicas: int,
                  max_replicas: int, warmup_s: float = 120.0) -> int:
    """The smallest fixed pool meeting the TTFT SLO over the first ``warmup_s`` seconds."""
    head = [r for r in requests if r.arrival_s <= requests[0].arrival_s + warmup_s]
    for count in range(min_replicas, max_replicas + 1):
        if fixed_pool(head, count, slo, settings).meets:
            return count
    return max_replicas


def fixed_pool(requests: Sequence[SimRequest], replicas: int, slo: Slo, settings: LoopSettings) -> FixedPool:
    """``requests`` replayed on ``replicas`` servers that never scale."""
    result = run(requests, uniform_pool(replicas, settings.profile), policy(settings.pick, settings.seed),
                 scrape_interval_s=settings.router_scrape_s, seed=settings.seed, telemetry=False)
    ttft = [o.ttft_ms for o in result.outcomes]
    p99 = quantile(ttft, 0.99) if ttft else math.inf
    within = sum(t <= slo.ttft_p99_ms for t in ttft) / (len(ttft) + len(result.dropped)) if ttft else 0.0
    return FixedPool(replicas, p99, within, bool(ttft) and not result.dropped and p99 <= slo.ttft_p99_ms)


def seed_targets(requests: Sequence[SimRequest], slo: Slo, settings: LoopSettings, warm: int,
                 signals: Sequence[Signal]) -> dict[Signal, list[float]]:
    """Candidate targets per signal (see the module docstring)."""
    prof = settings.profile
    mean_output = sum(r.output_tokens for r in requests) / len(requests)
    prefill_ms = mean_prefill_ms(requests, settings)
    queue_seed = max(1.0, slo.ttft_p99_ms / 2 / prefill_ms)
    duration = max(1.0, requests[-1].arrival_s - requests[0].arrival_s)
    e2e_s = (prefill_ms + mean_output * 15.0) / 1000  # ~15 ms per output token under batching
    concurrency = len(requests) / duration * e2e_s / max(warm, 1)  # Little's law, per server
    slots_seed = min(0.95, concurrency / prof.max_num_seqs)
    kv_bytes = prof.kv_blocks * BLOCK_TOKENS * KV_BYTES_PER_TOKEN
    grids = {
        Signal.QUEUE_SIZE: [3.0, 5.0, queue_seed / 2, queue_seed, queue_seed * 2],
        Signal.BATCH_SIZE: [0.95 * prof.max_num_seqs, 0.8 * prof.max_num_seqs, max(1.0, concurrency)],
        Signal.SLOTS_USED: [0.95, 0.8, max(0.05, slots_seed)],
        Signal.KV_CACHE_USAGE: [0.5, 0.7, 0.85],
        Signal.HBM_USED_BYTES: [prof.weights_bytes + f * kv_bytes for f in (0.5, 0.7, 0.85)],
        Signal.TTFT_SLO_RATIO: [0.25, 0.5, 0.8],
    }
    grids[Signal.PREFILL_BACKLOG] = grids[Signal.QUEUE_SIZE]
    grids[Signal.GPU_CACHE_USAGE] = grids[Signal.KV_CACHE_USAGE]
    return {signal: _grid(signal, grids[signal]) for signal in signals}


KUBERNETES_DEFAULT = Behavior(scale_down=replace(DEFAULT_SCALE_DOWN, stabilization_window_seconds=300))


def behaviors(load_delay_s: float, kubernetes_version: str | None) -> dict[str, Behavior]:
    """The behaviors stage 2 tries; stage 1 uses ``kubernetes-default`` (the defaults, spelled out)."""
    period = max(15, min(1800, math.ceil(load_delay_s)))
    tuned = {
        "fast-scale-down": Behavior(scale_down=ScalingRules((ScalingPolicy(PolicyType.PERCENT, 100, 15),),
                                                            stabilization_window_seconds=60)),
        "load-paced-up": Behavior(
            scale_up=ScalingRules((ScalingPolicy(PolicyType.PODS, 4, period), ScalingPolicy(PolicyType.PERCENT, 100,
                                                                                            period)),
                                  stabilization_window_seconds=0),
            scale_down=ScalingRules((ScalingPolicy(PolicyType.PERCENT, 50, 60),), stabilization_window_seconds=120)),
    }
    if tolerance_honored(kubernetes_version):
        tuned["scale-up-tolerance-0.05"] = replace(KUBERNETES_DEFAULT,
                                                   scale_up=replace(DEFAULT_SCALE_UP, tolerance=0.05))
    return tuned


def make_autoscaler(signal: Signal, target: float, behavior: Behavior | None, goal: Goal,
                    warm: int | None = None) -> Autoscaler:
    """The autoscaler for one candidate, exactly as :func:`emit` writes it and ``simulate`` reads it back
    (``warm``: the replicas its figures start from, written as :data:`~autoscale.manifest.INITIAL_REPLICAS`)."""
    workload = goal.workload
    metric = hpa_metric(signal, round(target * 1000), goal.pipeline, workload)
    spec = HpaSpec(name=workload.name, namespace=workload.namespace, min_replicas=goal.min_replicas,
                   max_replicas=goal.max_replicas, metrics=(metric,), behavior=behavior,
                   target_ref=ScaleTargetRef(name=workload.name), initial_replicas=warm)
    if goal.pipeline is not Pipeline.KEDA:
        return Autoscaler(spec)
    return Autoscaler(replace(spec, name=f"keda-hpa-{workload.name}"), "ScaledObject",
                      {metric.name: parse_query(series_query(signal, workload))})


def evaluate(candidate: HpaCandidate, requests: Sequence[SimRequest], slo: Slo, settings: LoopSettings,
             ttft_model: xgb.Booster | None = None) -> Evaluation:
    result = run_closed_loop(candidate.autoscaler, requests, settings, ttft_model=ttft_model)
    ttft_p99, tpot_p99 = result.ttft_quantile(0.99), result.tpot_quantile(0.99)
    meets = (not result.dropped and ttft_p99 <= slo.ttft_p99_ms
             and (slo.tpot_p99_ms is None or tpot_p99 <= slo.tpot_p99_ms))
    return Evaluation(candidate, result.replica_hours, ttft_p99, tpot_p99, result.ttft_attainment(slo.ttft_p99_ms),
                      result.rescales, meets, result, len(find_traps(candidate.autoscaler,
                                                                     load_delay_s=settings.profile.load_delay_s)))


Progress = Callable[[int, int, str], None]  # (runs done, runs planned, what runs next)


def recommend(requests: Sequence[SimRequest], goal: Goal, settings: LoopSettings = LoopSettings(), refinements: int = 2,
              progress: Progress | None = None) -> Recommendation:
    """Search signals, targets, behaviors and tolerances; see the module docstring."""
    slo = goal.slo
    signals = settings.model_server.scaling_signals(goal.router_signals)
    warm = warm_replicas(requests, slo, settings, goal.min_replicas, goal.max_replicas)
    settings = replace(settings, initial_replicas=warm,
                       ttft_slo_ms=slo.ttft_p99_ms if goal.router_signals else settings.ttft_slo_ms)
    if warm in (goal.min_replicas, goal.max_replicas):
        steady = fixed_pool(requests, warm, slo, settings)
        if steady.meets and warm == goal.min_replicas:  # the smallest pool allowed carries it all: nothing scales
            return Recommendation(None, (), settings, (), exercised=False, warm_replicas=warm, fixed=steady)
        if not steady.meets and warm == goal.max_replicas:  # the largest pool allowed misses: nothing can meet it
            return Recommendation(None, (), settings, (), warm_replicas=warm, ceiling=steady)
    load_delay = settings.profile.load_delay_s
    tuned = behaviors(load_delay, goal.kubernetes_version)
    seeds = seed_targets(requests, slo, settings, warm, signals)
    planned = [sum(len(t) for t in seeds.values()) + len(signals) * (refinements + len(tuned))]
    ttft_model = None
    if Signal.TTFT_SLO_RATIO in signals:
        if progress is not None:
            progress(0, planned[0], "learning the TTFT model from the pool's telemetry")
        ttft_model = learn_ttft_model(requests, settings.profile, settings.seed, settings.learning)
    evaluations: list[Evaluation] = []

    def try_candidate(signal: Signal, target: float, name: str, behavior: Behavior) -> Evaluation:
        candidate = HpaCandidate(signal, target, name, make_autoscaler(signal, target, behavior, goal, warm=warm))
        if progress is not None:
            progress(len(evaluations), planned[0], f"{signal.value} target {candidate.target_text}, {name}")
        evaluation = evaluate(candidate, requests, slo, settings, ttft_model)
        evaluations.append(evaluation)
        return evaluation

    for signal, targets in seeds.items():
        stage1 = [try_candidate(signal, t, "kubernetes-default", KUBERNETES_DEFAULT) for t in targets]
        for step in range(refinements):
            between = _bisect(signal, stage1)
            if between is None:
                planned[0] -= refinements - step
                break
            stage1.append(try_candidate(signal, between, "kubernetes-default", KUBERNETES_DEFAULT))
        best = _best(stage1)
        for name, behavior in tuned.items():
            try_candidate(signal, best.candidate.target, name, behavior)
    if progress is not None:
        progress(len(evaluations), len(evaluations), "done")
    chosen = _cheapest_passing(evaluations)
    exercised = scaling_exercised(evaluations, chosen)
    chosen = chosen if exercised else None
    traps = tuple(t for t in find_traps(chosen.candidate.autoscaler, load_delay_s=load_delay,
                                        kubernetes_version=goal.kubernetes_version, pipeline=goal.pipeline,
                                        model_server=settings.model_server)
                  if t.code not in SIMULATED_TRAPS) if chosen else ()
    cold = None
    if chosen is not None and warm > goal.min_replicas:
        cold = evaluate(chosen.candidate, requests, slo, replace(settings, initial_replicas=goal.min_replicas),
                        ttft_model)
    ceiling = None
    if not any(e.meets for e in evaluations):
        ceiling = fixed_pool(requests, goal.max_replicas, slo, settings)
    return Recommendation(chosen, tuple(evaluations), settings, traps, exercised, warm, cold, None, ceiling)


# Traps whose effect the closed loop measures (loading pods counted as missing, the tolerance band): they are in
# the figures already, so a recommendation does not repeat them as advice.
SIMULATED_TRAPS = frozenset({"slow-load", "small-target"})


def scaling_exercised(evaluations: Sequence[Evaluation], chosen: Evaluation | None) -> bool:
    """False when no run ever rescaled, the cheapest passing run never did (nothing about its target was
    tested), or every run cost the same within :data:`COST_NOISE`."""
    if not any(e.rescales for e in evaluations) or (chosen is not None and not chosen.rescales):
        return False
    costs = [e.replica_hours for e in evaluations]
    return max(costs) - min(costs) > COST_NOISE * max(costs)


def mean_prefill_ms(requests: Sequence[SimRequest], settings: LoopSettings) -> float:
    """One server's prefill time of the trace's mean prompt, uncached."""
    prof = settings.profile
    return prof.a_ms + prof.b_ms_per_prefill_token * sum(r.prompt_tokens for r in requests) / len(requests)


def _cheapest_passing(evaluations: Sequence[Evaluation]) -> Evaluation | None:
    passing = [e for e in evaluations if e.meets]
    if not passing:
        return None
    cheapest = min(e.replica_hours for e in passing)
    near = [e for e in passing if e.replica_hours <= cheapest * (1 + COST_NOISE)]
    return min(near, key=lambda e: (e.traps, -e.attainment, e.replica_hours))


def _best(evaluations: Sequence[Evaluation]) -> Evaluation:
    """The cheapest passing evaluation, or else the one closest to passing."""
    return _cheapest_passing(evaluations) or max(evaluations, key=lambda e: (e.attainment, -e.replica_hours))


def _bisect(signal: Signal, evaluations: Sequence[Evaluation]) -> float | None:
    """The geometric midpoint between the highest passing target and the next failing one above it.

    A higher target means fewer replicas for every searched signal, so the cheapest passing target
    sits just below the first failing one.
    """
    passing = [e.candidate.target for e in evaluations if e.meets]
    if not passing:
        return None
    low = max(passing)
    above = [e.candidate.target for e in evaluations if not e.meets and e.candidate.target > low]
    if not above:
        return None
    middle = _grid(signal, [math.sqrt(low * min(above))])
    return middle[0] if middle and low < middle[0] < min(above) else None


def _grid(signal: Signal, values: Sequence[float]) -> list[float]:
    """Targets as a manifest writes them: whole GiB for memory, two decimals otherwise."""
    if signal is Signal.HBM_USED_BYTES:
        return sorted({float(round(v / GIB) * GIB) for v in values if v >= GIB})
    return sorted({round(v, 2) for v in values if v > 0})
