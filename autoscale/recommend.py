"""Search HPA configurations on a trace and recommend the cheapest one that meets a latency SLO.

Steps:

1. **Warm start** — the smallest fixed pool that meets the TTFT SLO on the trace's first
   ``warmup_s`` seconds; every closed-loop run starts at that size, as a pool already in service would.
2. **Seeds** — per signal, targets around an analytic seed: for the queue, the number of queued
   requests one prefill each can wait through within half the TTFT SLO (``SLO / 2 / prefill_ms``), plus
   the guide's 3 and 5; for batch slots, Little's law (``λ · mean E2E / servers / slots``) plus the
   guide's "just below 1"; KV-cache usage and the predicted-TTFT/SLO ratio on fixed grids.
3. **Stage 1** — every target with Kubernetes' default behavior, spelled out in ``behavior`` so the
   emitted manifest is complete (scale-up +4 pods or +100 % per 15 s, scale-down window 300 s); then
   ``refinements`` bisection steps between the highest passing target and the next failing one.
4. **Stage 2** — each signal's best target with tuned behaviors (shorter scale-down window,
   scale-up paced by the model load time) and a tighter scale-up tolerance.

A run meets the SLO when its TTFT p99 (and TPOT p99, if given) are within the limits; the cheapest such
run (replica-hours) wins, ties broken by attainment. Dropped requests count as misses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from headroom.autoscale.closed_loop import LoopResult, LoopSettings, run_closed_loop
from headroom.autoscale.quantity import to_milli
from headroom.autoscale.signals import QueueDrainTtft, Signal, SignalContext
from headroom.autoscale.spec import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    Behavior,
    HpaSpec,
    MetricSpec,
    MetricTarget,
    PolicyType,
    ScalingPolicy,
    ScalingRules,
    SourceType,
    TargetType,
)
from headroom.autoscale.traps import Trap, find_traps
from headroom.sim.policies import policy
from headroom.sim.pool import run, uniform_pool
from headroom.sim.profile import profile
from headroom.sim.request import Request
from headroom.sim.results import quantile

SEARCHED_SIGNALS = (Signal.QUEUE_SIZE, Signal.SLOTS_USED, Signal.KV_CACHE_USAGE, Signal.TTFT_SLO_RATIO)


@dataclass(frozen=True)
class Slo:
    ttft_p99_ms: float
    tpot_p99_ms: float | None = None


@dataclass(frozen=True)
class Candidate:
    signal: Signal
    target: float
    behavior: str
    spec: HpaSpec


@dataclass(frozen=True)
class Evaluation:
    candidate: Candidate
    replica_hours: float
    ttft_p99_ms: float
    tpot_p99_ms: float
    attainment: float
    rescales: int
    meets: bool
    result: LoopResult


@dataclass(frozen=True)
class Recommendation:
    best: Evaluation | None
    evaluations: tuple[Evaluation, ...]
    warm_replicas: int
    traps: tuple[Trap, ...]

    def ranked(self) -> list[Evaluation]:
        """Passing runs by cost, then failing ones by attainment."""
        passing = sorted((e for e in self.evaluations if e.meets), key=lambda e: (e.replica_hours, -e.attainment))
        failing = sorted((e for e in self.evaluations if not e.meets), key=lambda e: -e.attainment)
        return passing + failing


def warm_replicas(requests: Sequence[Request], slo: Slo, settings: LoopSettings, min_replicas: int,
                  max_replicas: int, warmup_s: float = 120.0) -> int:
    """The smallest fixed pool meeting the TTFT SLO over the first ``warmup_s`` seconds."""
    head = [r for r in requests if r.arrival_s <= requests[0].arrival_s + warmup_s]
    for count in range(min_replicas, max_replicas + 1):
        result = run(head, uniform_pool(count, settings.server_type), policy(settings.pick, settings.seed),
                     scrape_interval_s=settings.router_scrape_s, seed=settings.seed, telemetry=False)
        ttft = [o.ttft_ms for o in result.outcomes]
        if ttft and not result.dropped and quantile(ttft, 0.99) <= slo.ttft_p99_ms:
            return count
    return max_replicas


def seed_targets(requests: Sequence[Request], slo: Slo, settings: LoopSettings, warm: int) -> dict[Signal, list[float]]:
    """Candidate targets per signal (see the module docstring)."""
    prof = profile(settings.server_type)
    mean_output = sum(r.output_tokens for r in requests) / len(requests)
    prefill_ms = mean_prefill_ms(requests, settings.server_type)
    queue_seed = max(1.0, slo.ttft_p99_ms / 2 / prefill_ms)
    duration = max(1.0, requests[-1].arrival_s - requests[0].arrival_s)
    rate = len(requests) / duration
    e2e_s = (prefill_ms + mean_output * 15.0) / 1000  # ~15 ms per output token under batching
    slots_seed = min(0.95, rate * e2e_s / max(warm, 1) / prof.max_num_seqs)
    return {
        Signal.QUEUE_SIZE: _grid([3.0, 5.0, queue_seed / 2, queue_seed, queue_seed * 2]),
        Signal.SLOTS_USED: _grid([0.95, 0.8, max(0.05, slots_seed)]),
        Signal.KV_CACHE_USAGE: _grid([0.5, 0.7, 0.85]),
        Signal.TTFT_SLO_RATIO: _grid([0.25, 0.5, 0.8]),
    }


KUBERNETES_DEFAULT = Behavior(scale_down=replace(DEFAULT_SCALE_DOWN, stabilization_window_seconds=300))


def behaviors(load_delay_s: float) -> dict[str, Behavior]:
    """The behaviors stage 2 tries; stage 1 uses ``kubernetes-default`` (the defaults, spelled out)."""
    period = max(15, min(1800, math.ceil(load_delay_s)))
    return {
        "fast-scale-down": Behavior(scale_down=ScalingRules((ScalingPolicy(PolicyType.PERCENT, 100, 15),),
                                                            stabilization_window_seconds=60)),
        "load-paced-up": Behavior(
            scale_up=ScalingRules((ScalingPolicy(PolicyType.PODS, 4, period), ScalingPolicy(PolicyType.PERCENT, 100,
                                                                                            period)),
                                  stabilization_window_seconds=0),
            scale_down=ScalingRules((ScalingPolicy(PolicyType.PERCENT, 50, 60),), stabilization_window_seconds=120)),
    }


def make_spec(signal: Signal, target: float, behavior: Behavior | None, min_replicas: int, max_replicas: int,
              name: str = "model-server") -> HpaSpec:
    metric = MetricSpec(SourceType.PODS, signal.value, MetricTarget(TargetType.AVERAGE_VALUE, to_milli(f"{target:g}")))
    return HpaSpec(name=name, min_replicas=min_replicas, max_replicas=max_replicas, metrics=(metric,),
                   behavior=behavior)


def evaluate(candidate: Candidate, requests: Sequence[Request], slo: Slo, settings: LoopSettings) -> Evaluation:
    result = run_closed_loop(candidate.spec, requests, settings)
    ttft_p99, tpot_p99 = result.ttft_quantile(0.99), result.tpot_quantile(0.99)
    meets = (not result.dropped and ttft_p99 <= slo.ttft_p99_ms
             and (slo.tpot_p99_ms is None or tpot_p99 <= slo.tpot_p99_ms))
    return Evaluation(candidate, result.replica_seconds / 3600, ttft_p99, tpot_p99,
                      result.ttft_attainment(slo.ttft_p99_ms), result.rescales, meets, result)


def recommend(requests: Sequence[Request], slo: Slo, min_replicas: int, max_replicas: int,
              settings: LoopSettings = LoopSettings(), refinements: int = 2,
              progress: Callable[[str], None] | None = None) -> Recommendation:
    """Search signals, targets, behaviors and tolerances; see the module docstring."""
    prof = profile(settings.server_type)
    load_delay = prof.load_delay_s if settings.load_delay_s is None else settings.load_delay_s
    prefill_ms = mean_prefill_ms(requests, settings.server_type)
    warm = warm_replicas(requests, slo, settings, min_replicas, max_replicas)
    settings = replace(settings, initial_replicas=warm,
                       signals=SignalContext(settings.signals.memory_capacity_bytes, slo.ttft_p99_ms,
                                             QueueDrainTtft(prefill_ms)))
    evaluations: list[Evaluation] = []

    def try_candidate(candidate: Candidate) -> Evaluation:
        if progress is not None:
            progress(f"{candidate.signal.value} target {candidate.target:g}, {candidate.behavior}")
        evaluation = evaluate(candidate, requests, slo, settings)
        evaluations.append(evaluation)
        return evaluation

    tuned = behaviors(load_delay)
    for signal, targets in seed_targets(requests, slo, settings, warm).items():
        stage1 = [try_candidate(Candidate(signal, t, "kubernetes-default",
                                          make_spec(signal, t, KUBERNETES_DEFAULT, min_replicas, max_replicas)))
                  for t in targets]
        for _ in range(refinements):
            between = _bisect(stage1)
            if between is None:
                break
            stage1.append(try_candidate(Candidate(signal, between, "kubernetes-default",
                                                  make_spec(signal, between, KUBERNETES_DEFAULT, min_replicas,
                                                            max_replicas))))
        best = _best(stage1)
        for name, behavior in tuned.items():
            try_candidate(Candidate(signal, best.candidate.target, name,
                                    make_spec(signal, best.candidate.target, behavior, min_replicas, max_replicas)))
        tight_up = replace(KUBERNETES_DEFAULT, scale_up=replace(DEFAULT_SCALE_UP, tolerance=0.05))
        try_candidate(Candidate(signal, best.candidate.target, "scale-up-tolerance-0.05",
                                make_spec(signal, best.candidate.target, tight_up, min_replicas, max_replicas)))
    chosen = _cheapest_passing(evaluations)
    traps = tuple(find_traps(chosen.candidate.spec, load_delay_s=load_delay)) if chosen else ()
    return Recommendation(chosen, tuple(evaluations), warm, traps)


def mean_prefill_ms(requests: Sequence[Request], server_type: str) -> float:
    """One server's prefill time of the trace's mean prompt, uncached."""
    prof = profile(server_type)
    return prof.a_ms + prof.b_ms_per_prefill_token * sum(r.prompt_tokens for r in requests) / len(requests)


def _cheapest_passing(evaluations: Sequence[Evaluation]) -> Evaluation | None:
    passing = [e for e in evaluations if e.meets]
    return min(passing, key=lambda e: (e.replica_hours, -e.attainment)) if passing else None


def _best(evaluations: Sequence[Evaluation]) -> Evaluation:
    """The cheapest passing evaluation, or else the one closest to passing."""
    return _cheapest_passing(evaluations) or max(evaluations, key=lambda e: (e.attainment, -e.replica_hours))


def _bisect(evaluations: Sequence[Evaluation]) -> float | None:
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
    middle = round(math.sqrt(low * min(above)), 2)
    return middle if low < middle < min(above) else None


def _grid(values: Sequence[float]) -> list[float]:
    return sorted({round(v, 2) for v in values if v > 0})
