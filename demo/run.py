"""The whole system on one machine: broker, two identical simulated pools, learning worker and a router per
pool — real processes on loopback — under the same trace load, with a regime change half way.

One arm is routed by headroom (predicted latency, models learned from its own telemetry); the other, the
baseline, by the heuristic profile alone (its requests opt out of prediction). The demo plays a
:class:`~sim.scenarios.Scenario` (:func:`scenario`): the Azure trace at a share of the pool's capacity, and some
H100 servers of both pools slowing down at the same moment. :class:`Demo` starts every component at once and says
when each is ready, drives the load while a live view follows it, and builds the :class:`~demo.report.Report` —
also a partial one, after a Ctrl-C. Every number in it is read from the components themselves (their
``/metrics``, Kafka) or measured by the load generator as a client. The run makes its own model-signing key
pair: the worker signs with it, headroom's router trusts it.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException

if TYPE_CHECKING:
    import polars as pl

    from headroom.demo.processes import Component

from headroom.contract.topics import KafkaSettings
from headroom.demo import load
from headroom.demo.arms import ARMS, Layout, Ports, TwoArms, change_events
from headroom.demo.report import WARMUP_SHARE, Evidence, Report, compare_windows, heuristic_share
from headroom.demo.scrape import Samples, by_label, scrape, total
from headroom.demo.settings import DemoSettings
from headroom.demo.stats import summarize
from headroom.kafka_topics import end_offsets
from headroom.sim.scenarios import Scenario, Slowdown

log = logging.getLogger(__name__)

__all__ = ["ARMS", "Demo", "Ports", "Tick", "scenario"]


def scenario(settings: DemoSettings) -> Scenario:
    """What the demo plays: its pool at ``load`` of its capacity, the first ``slowed_servers`` H100 servers slowing
    down (say, a bad driver roll-out reaching some nodes) at ``regime_change_at`` of the run."""
    if not 0 < settings.slowed_servers <= settings.fast_servers:
        raise ValueError(f"HEADROOM_DEMO_SLOWED_SERVERS is {settings.slowed_servers}: it must be between 1 and the "
                         f"{settings.fast_servers} H100 servers (HEADROOM_DEMO_FAST_SERVERS)")
    h100 = tuple(f"h100-{i}" for i in range(settings.fast_servers))
    return Scenario("demo", Slowdown(h100[:settings.slowed_servers], settings.slowdown), pool=h100 + tuple(
        f"a100-{i}" for i in range(settings.slow_servers)), load=settings.load, duration_s=settings.duration_s,
        change_at_s=settings.duration_s * settings.regime_change_at, time_scale=settings.time_scale)


@dataclass(frozen=True)
class Tick:
    """What the live view shows each second."""

    elapsed: float
    change_at: float
    warmup_s: float
    outcomes: list[load.ClientOutcome]
    router: Samples  # headroom's router
    worker: Samples
    warmed: Samples | None  # headroom's router at the end of the warm-up, once it is over


class Demo:
    def __init__(self, settings: DemoSettings, on_ready: Callable[[str, float], None] | None = None):
        self.settings, self.scenario = settings, scenario(settings)
        self.arms = TwoArms(settings.state_dir, settings.base_port, settings.seed, Layout.of(self.scenario),
                            min_samples=settings.min_samples, retrain_interval_s=settings.retrain_interval_s,
                            on_ready=on_ready)
        self.ports, self.kafka = self.arms.ports, self.arms.kafka
        self.began, self.load_start = time.monotonic(), os.getloadavg()
        self.outcomes: list[load.ClientOutcome] = []
        self.timeline: list[Tick] = []
        self.change_at = self.scenario.change_at_s
        self.changes_made: list[dict[str, Any]] = []
        self.warmup_s = settings.duration_s * WARMUP_SHARE
        self.load_began_unix: float | None = None

    @property
    def server_count(self) -> int:
        return self.arms.server_count

    def start(self) -> None:
        """The broker, then every other component at once; ``on_ready`` as each becomes ready."""
        self.arms.start()

    def drive(self, on_tick: Callable[[Tick], None] | None = None) -> None:
        """The trace through both arms at once, with the regime change; outcomes and ticks are kept as they come."""
        s, played = self.settings, self.scenario
        mix = load.Mix(slo_ttft_ms=played.slo[0], slo_tpot_ms=played.slo[1], seed=s.seed)
        dressed = load.dress(played.requests(seed=s.seed), mix)
        warmed: list[Samples] = []

        def tick(elapsed: float) -> None:
            router = scrape(f"http://127.0.0.1:{self.ports.router_http}/metrics")
            worker = scrape(f"http://127.0.0.1:{self.ports.worker_metrics}/metrics")
            if not warmed and elapsed >= self.warmup_s:
                warmed.append(router)
            result = Tick(elapsed, self.change_at, self.warmup_s, self.outcomes, router, worker,
                          warmed[0] if warmed else None)
            self.timeline.append(result)
            if on_tick:
                on_tick(result)

        self.load_began_unix = time.time()
        self.arms.drive(dressed, s.duration_s, change_events(played, self.arms, self.changes_made),
                        self.outcomes.append, tick)

    def finish(self, interrupted: bool = False) -> tuple[Report, Evidence]:
        """Read what the components counted, stop them all, and build the report (partial when interrupted)."""
        router = worker = baseline = None
        telemetry = 0
        records = None
        try:
            if self.arms.start_offsets is not None:
                router = _scrape_or_none(f"http://127.0.0.1:{self.ports.router_http}/metrics")
                baseline = _scrape_or_none(f"http://127.0.0.1:{self.ports.baseline_http}/metrics")
                worker = _scrape_or_none(f"http://127.0.0.1:{self.ports.worker_metrics}/metrics")
                completed = sum(o.status == 200 for o in self.outcomes if o.arm == "headroom")
                telemetry = _wait_for_telemetry(self.kafka, self.arms.start_offsets, completed,
                                                timeout_s=3.0 if interrupted else 20.0)
                records = _telemetry_records(self.kafka)
        finally:
            started = list(self.arms.supervisor.components)
            self.stop()
        return self._report(router or {}, baseline or {}, worker or {}, telemetry, interrupted, started), \
            Evidence(self.outcomes, [(t.elapsed, t.worker) for t in self.timeline], records, self.load_began_unix,
                     [(t.elapsed, t.router) for t in self.timeline])

    def stop(self) -> None:
        self.arms.stop()

    def _report(self, router: Samples, baseline: Samples, worker: Samples, telemetry: int, interrupted: bool,
                started: list[Component]) -> Report:
        s = self.settings
        ran = self.timeline[-1].elapsed if self.timeline else 0.0
        seconds = s.duration_s if not interrupted else max(ran, 1e-9)
        change = min(self.change_at, seconds)
        arms = {}
        for arm in ARMS:
            mine = [o for o in self.outcomes if o.arm == arm]
            arms[arm] = {"whole": asdict(summarize(mine, seconds)),
                         "before": asdict(summarize([o for o in mine if o.sent_at < self.change_at], change)),
                         "after": asdict(summarize([o for o in mine if o.sent_at >= self.change_at],
                                                   max(seconds - self.change_at, 1e-9)))}
        warmed = next((t.router for t in self.timeline if t.elapsed >= self.warmup_s), None)
        played = self.scenario
        return Report(
            settings={k: str(v) for k, v in asdict(s).items()}, scenario=played.describe(),
            rate_per_s=played.load * played.capacity(), slo_ms=list(played.slo),
            windows_after=compare_windows(self.outcomes, self.change_at, seconds), changes_made=self.changes_made,
            host={"cores": os.cpu_count(), "load_average_at_start": list(self.load_start),
                  "load_average_at_end": list(os.getloadavg())},
            components=self.arms.ready, arms=arms, telemetry_in_kafka=telemetry,
            model_versions={"/".join(labels.values()): value
                            for labels, value in router.get("headroom_router_model_version", [])},
            promotions=total(worker, "headroom_model_promotions_total"),
            drift_events=by_label(worker, "headroom_drift_events_total", "target"),
            drift_events_before_change=_drift_events_by(self.timeline, self.change_at),
            heuristic_reasons=by_label(router, "headroom_router_heuristic_decisions_total", "reason"),
            decisions=by_label(router, "headroom_router_decisions_total", "profile"),
            heuristic_share=heuristic_share(None, router),
            heuristic_share_after_warmup=heuristic_share(warmed, router) if warmed is not None else float("nan"),
            peak_corrections_after_change=_peak_corrections(self.timeline, self.change_at),
            decision_ms={"headroom": _mean_decision_ms(router), "baseline": _mean_decision_ms(baseline)},
            held=total(router, "headroom_router_requests_held_total"),
            interrupted=interrupted, load_seconds=ran,
            processes_left=[c.name for c in started if c.process.poll() is None],
            seconds=time.monotonic() - self.began)


def _mean_decision_ms(router: Samples) -> float:
    decisions = total(router, "headroom_router_decision_seconds_count")
    return 1000.0 * total(router, "headroom_router_decision_seconds_sum") / decisions if decisions else math.nan


def _peak_corrections(timeline: list[Tick], after_s: float) -> dict[str, dict[str, float]]:
    peaks: dict[str, dict[str, float]] = {}
    for tick in timeline:
        if tick.elapsed >= after_s:
            for labels, factor in tick.router.get("headroom_router_latency_correction", []):
                mine = peaks.setdefault(labels.get("server", ""), {})
                target = labels.get("target", "")
                mine[target] = max(mine.get(target, 0.0), factor)
    return peaks


def _drift_events_by(timeline: list[Tick], at_s: float) -> float:
    """Drift events the worker had counted by ``at_s`` seconds into the load."""
    seen = [t.worker for t in timeline if t.elapsed <= at_s]
    return total(seen[-1], "headroom_drift_events_total") if seen else 0.0


def _scrape_or_none(url: str) -> Samples | None:
    try:
        return scrape(url, timeout_s=2.0)
    except OSError:
        return None


def _wait_for_telemetry(kafka: KafkaSettings, start: dict[int, int], expected: int, timeout_s: float = 20.0) -> int:
    """Records the run added to the telemetry topic, once it reaches ``expected`` or the time is up."""
    deadline = time.monotonic() + timeout_s
    count = 0
    while time.monotonic() < deadline:
        ends = end_offsets(kafka, kafka.telemetry_topic)
        count = sum(end - start.get(p, 0) for p, end in ends.items())
        if count >= expected:
            break
        time.sleep(0.5)
    return count


def _telemetry_records(kafka: KafkaSettings) -> pl.DataFrame | None:
    """The run's telemetry as a frame (the topic holds this run alone: the broker's state was wiped)."""
    from headroom.backtest.replay import read_telemetry

    try:
        return read_telemetry(kafka, kafka.telemetry_topic, timeout_s=5.0).records
    except (KafkaException, TimeoutError, OSError) as err:  # the plot is left out, never the report
        log.warning("telemetry not read for the predicted-vs-actual plot: %s", err)
        return None
