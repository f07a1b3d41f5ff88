"""The whole system on one machine: broker, two identical simulated pools, learning worker, predictor and a
router per pool — real processes on loopback — under the same trace load, with a regime change half way.

One arm is routed by headroom (predicted latency, models learned from its own telemetry); the other, the
baseline, by the heuristic profile alone (its requests opt out of prediction). Both pools' H100 servers slow
down at the same moment. :class:`Demo` starts every component at once and says when each is ready, drives
the load while a live view follows it, and builds the :class:`~demo.report.Report` — also a partial one,
after a Ctrl-C. Every number in it is read from the components themselves (their ``/metrics``, Kafka) or
measured by the load generator as a client. The run makes its own model-signing key pair: the worker signs
with it, the predictor and the routers trust it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from confluent_kafka import KafkaException

if TYPE_CHECKING:
    import polars as pl

from headroom.contract.settings import from_env
from headroom.contract.signing import SigningKey
from headroom.contract.topics import KafkaSettings
from headroom.demo import load
from headroom.demo.processes import Supervisor
from headroom.demo.report import WARMUP_SHARE, Evidence, Report, heuristic_share
from headroom.demo.scrape import Samples, by_label, scrape, total
from headroom.demo.settings import DemoSettings
from headroom.demo.stats import summarize
from headroom.localkafka import broker
from headroom.localkafka.admin import end_offsets
from headroom.localkafka.cli import start as start_broker
from headroom.localkafka.settings import BrokerSettings
from headroom.router.headers import OPT_OUT
from headroom.sim.traces import load_azure

log = logging.getLogger(__name__)

SLOWED_POOL = "h100"  # the regime change: every server of this pool slows down (say, a bad driver roll-out)
ARMS = ("headroom", "baseline")


@dataclass
class Ports:
    base: int

    def __post_init__(self) -> None:
        self.worker_metrics = self.base
        self.predictor = self.base + 1
        self.predictor_metrics = self.base + 2
        self.router_http = self.base + 3  # headroom's arm
        self.router_pick = self.base + 4
        self.router_ext_proc = self.base + 5
        self.baseline_http = self.base + 6
        self.servers = self.base + 10  # consecutive: each pool type's servers, headroom's arm first

    def all(self, servers: int) -> list[int]:
        return [*range(self.base, self.base + 7), *range(self.servers, self.servers + servers)]


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
    def __init__(self, settings: DemoSettings, trace: Path,
                 on_ready: Callable[[str, float], None] | None = None):
        self.settings, self.trace, self.on_ready = settings, trace, on_ready
        self.ports = Ports(settings.base_port)
        self.broker = from_env(BrokerSettings, state_dir=settings.state_dir)
        self.kafka = from_env(KafkaSettings, bootstrap_servers=self.broker.bootstrap)
        self.supervisor = Supervisor(settings.state_dir / "logs", env={
            "HEADROOM_KAFKA_BOOTSTRAP": self.kafka.bootstrap_servers,
            "HEADROOM_STATE_DIR": str(settings.state_dir),
            "HEADROOM_PIPELINE_DATA_DIR": str(settings.state_dir / "pipeline"),
            # A short run: first models from fewer samples; periodic retraining is slower than the default, so it
            # is the drift detector, not the clock, that answers the regime change.
            "HEADROOM_RETRAIN_MIN_SAMPLES": str(settings.min_samples),
            "HEADROOM_RETRAIN_INTERVAL": str(settings.retrain_interval_s)})
        self.began, self.load_start = time.monotonic(), os.getloadavg()
        self.ready: dict[str, float] = {}
        self.outcomes: list[load.ClientOutcome] = []
        self.timeline: list[Tick] = []
        self.change_at = settings.duration_s * settings.regime_change_at
        self.warmup_s = settings.duration_s * WARMUP_SHARE
        self.servers = self._servers()
        self.start_offsets: dict[int, int] | None = None
        self.load_began_unix: float | None = None
        self.broker_started = False

    @property
    def server_count(self) -> int:
        return len(ARMS) * (self.settings.fast_servers + self.settings.slow_servers)

    def start(self) -> None:
        """The broker, then every other component at once; ``on_ready`` as each becomes ready."""
        shutil.rmtree(self.settings.state_dir, ignore_errors=True)
        self.supervisor.env.update(_signing_keys(self.settings.state_dir / "signing"))
        started = time.monotonic()
        self.broker_started = True
        start_broker(self.broker)
        self._ready("Kafka broker", time.monotonic() - started)
        specs = [*self._pools(), ("worker", ["worker", "start", "--app-id", "headroom-demo", "--metrics-port",
                                             str(self.ports.worker_metrics), "--log-level", "info"],
                                  _answers(f"http://127.0.0.1:{self.ports.worker_metrics}/metrics")),
                 ("predictor", ["predictor", "serve", "--port", str(self.ports.predictor), "--metrics-port",
                                str(self.ports.predictor_metrics)],
                  _answers(f"http://127.0.0.1:{self.ports.predictor_metrics}/metrics"))]
        for arm, port in zip(ARMS, (self.ports.router_http, self.ports.baseline_http)):
            specs.append((f"router ({arm})", ["router", "serve", "--config", str(self._router_config(arm))],
                          _answers(f"http://127.0.0.1:{port}/metrics")))
        self.supervisor.start_all(specs, on_ready=lambda component, seconds: self._ready(component.name, seconds))
        self.start_offsets = end_offsets(self.kafka, self.kafka.telemetry_topic)

    def drive(self, on_tick: Callable[[Tick], None] | None = None) -> None:
        """The trace through both arms at once, with the regime change; outcomes and ticks are kept as they come."""
        s = self.settings
        requests = load_azure(self.trace, rate=s.rate, seed=s.seed, limit=int(s.rate * s.duration_s * 1.2) + 10)
        dressed = load.dress([r for r in requests if r.arrival_s < s.duration_s], load.Mix(seed=s.seed))
        arms = [load.Arm("headroom", f"http://127.0.0.1:{self.ports.router_http}"),
                load.Arm("baseline", f"http://127.0.0.1:{self.ports.baseline_http}", ((OPT_OUT, "true"),))]
        self.load_began_unix = time.time()
        asyncio.run(self._drive(arms, dressed, on_tick))
        self.supervisor.check()

    async def _drive(self, arms: list[load.Arm], dressed: list, on_tick: Callable[[Tick], None] | None) -> None:
        async def regime_change() -> None:
            await asyncio.sleep(self.change_at)
            for servers in self.servers.values():
                for _, address, pool in servers:
                    if pool == SLOWED_POOL:
                        await asyncio.to_thread(_slow_down, address, self.settings.slowdown)

        async def ticks() -> None:
            began, warmed = time.monotonic(), None
            while True:
                await asyncio.sleep(1.0)
                self.supervisor.check()
                router, worker = await asyncio.gather(
                    asyncio.to_thread(scrape, f"http://127.0.0.1:{self.ports.router_http}/metrics"),
                    asyncio.to_thread(scrape, f"http://127.0.0.1:{self.ports.worker_metrics}/metrics"))
                elapsed = time.monotonic() - began
                if warmed is None and elapsed >= self.warmup_s:
                    warmed = router
                tick = Tick(elapsed, self.change_at, self.warmup_s, self.outcomes, router, worker, warmed)
                self.timeline.append(tick)
                if on_tick:
                    on_tick(tick)

        side = [asyncio.create_task(regime_change()), asyncio.create_task(ticks())]
        try:
            await load.drive(arms, dressed, max_seconds=self.settings.duration_s, on_outcome=self.outcomes.append)
        finally:
            for task in side:
                task.cancel()

    def finish(self, interrupted: bool = False) -> tuple[Report, Evidence]:
        """Read what the components counted, stop them all, and build the report (partial when interrupted)."""
        router = worker = None
        telemetry = 0
        records = None
        try:
            if self.start_offsets is not None:
                router = _scrape_or_none(f"http://127.0.0.1:{self.ports.router_http}/metrics")
                worker = _scrape_or_none(f"http://127.0.0.1:{self.ports.worker_metrics}/metrics")
                completed = sum(o.status == 200 for o in self.outcomes if o.arm == "headroom")
                telemetry = _wait_for_telemetry(self.kafka, self.start_offsets, completed,
                                                timeout_s=3.0 if interrupted else 20.0)
                records = _telemetry_records(self.kafka)
        finally:
            started = list(self.supervisor.components)
            self.stop()
        return self._report(router or {}, worker or {}, telemetry, interrupted, started), \
            Evidence(self.outcomes, [(t.elapsed, t.worker) for t in self.timeline], records, self.load_began_unix)

    def stop(self) -> None:
        self.supervisor.stop()
        if self.broker_started:
            broker.down(self.broker)

    def _report(self, router: Samples, worker: Samples, telemetry: int, interrupted: bool,
                started: list) -> Report:
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
        return Report(
            settings={k: str(v) for k, v in asdict(s).items()},
            host={"cores": os.cpu_count(), "load_average_at_start": list(self.load_start),
                  "load_average_at_end": list(os.getloadavg())},
            components=self.ready, arms=arms, telemetry_in_kafka=telemetry,
            model_versions={"/".join(labels.values()): value
                            for labels, value in router.get("headroom_router_model_version", [])},
            promotions=total(worker, "headroom_model_promotions_total"),
            drift_events=by_label(worker, "headroom_drift_events_total", "target"),
            drift_events_before_change=_drift_events_by(self.timeline, self.change_at),
            heuristic_reasons=by_label(router, "headroom_router_heuristic_decisions_total", "reason"),
            decisions=by_label(router, "headroom_router_decisions_total", "profile"),
            heuristic_share=heuristic_share(None, router),
            heuristic_share_after_warmup=heuristic_share(warmed, router) if warmed is not None else float("nan"),
            interrupted=interrupted, load_seconds=ran,
            processes_left=[c.name for c in started if c.process.poll() is None],
            seconds=time.monotonic() - self.began)

    def _ready(self, name: str, seconds: float) -> None:
        self.ready[name] = round(seconds, 1)
        if self.on_ready:
            self.on_ready(name, seconds)

    def _servers(self) -> dict[str, list[tuple[str, str, str]]]:
        """Per arm, (id, address, pool key) of its servers: one process per type serves both arms' servers."""
        s, out = self.settings, {arm: [] for arm in ARMS}
        first = self.ports.servers
        for kind, count in (("h100", s.fast_servers), ("a100", s.slow_servers)):
            for a, arm in enumerate(ARMS):
                out[arm] += [(f"{kind}-{i}", f"127.0.0.1:{first + a * count + i}", kind) for i in range(count)]
            first += len(ARMS) * count
        return out

    def _pools(self) -> list[tuple[str, list[str], Callable[[], bool]]]:
        s, specs = self.settings, []
        first = self.ports.servers
        for kind, count in (("h100", s.fast_servers), ("a100", s.slow_servers)):
            if count:
                addresses = [f"127.0.0.1:{first + i}" for i in range(len(ARMS) * count)]
                specs.append((f"{kind} servers ({len(ARMS)}×{count})",
                              ["sim", "serve", "--servers", str(len(ARMS) * count), "--server-type", kind,
                               "--base-port", str(first), "--seed", str(s.seed + first - self.ports.servers)],
                              lambda addresses=addresses: all(_answers(f"http://{a}/health")() for a in addresses)))
            first += len(ARMS) * count
        return specs

    def _router_config(self, arm: str) -> Path:
        if arm == "headroom":
            settings = {"httpPort": self.ports.router_http, "pickPort": self.ports.router_pick,
                        "extProcPort": self.ports.router_ext_proc, "predictor": "remote",
                        "predictorAddresses": f"127.0.0.1:{self.ports.predictor}"}
        else:  # the heuristic profile only; its telemetry would teach the models a pool they do not route
            settings = {"httpPort": self.ports.baseline_http, "pickPort": -1, "extProcPort": -1, "predictor": "none",
                        "telemetry": False}
        config = {"settings": {**settings, "seed": self.settings.seed},
                  "servers": [{"id": sid, "address": address, "pool": pool} for sid, address, pool in self.servers[arm]]}
        path = self.settings.state_dir / f"router-{arm}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path


def _drift_events_by(timeline: list[Tick], at_s: float) -> float:
    """Drift events the worker had counted by ``at_s`` seconds into the load."""
    seen = [t.worker for t in timeline if t.elapsed <= at_s]
    return total(seen[-1], "headroom_drift_events_total") if seen else 0.0


def _slow_down(address: str, factor: float) -> None:
    request = urllib.request.Request(f"http://{address}/admin/slowdown", method="POST",
                                     data=json.dumps({"factor": factor}).encode(),
                                     headers={"content-type": "application/json"})
    urllib.request.urlopen(request, timeout=5).close()


def _signing_keys(directory: Path) -> dict[str, str]:
    """A fresh key pair, as the worker's key to sign with and the readers' key to trust."""
    private, public = SigningKey.generate().write(directory, "worker")
    return {"HEADROOM_MODEL_SIGNING_KEY_FILE": str(private), "HEADROOM_MODEL_TRUSTED_KEYS": str(public)}


def _answers(url: str) -> Callable[[], bool]:
    def check() -> bool:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    return check


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
