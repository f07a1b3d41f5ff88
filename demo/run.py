"""The whole system on one machine: broker, simulated pool, learning worker, predictor, router — real
processes on loopback — under trace load through the router, with a regime change half way.

:func:`run` returns a :class:`Report`; every number in it is read from the components themselves
(their ``/metrics``, Kafka offsets) or measured by the load generator as a client.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.demo import load
from headroom.demo.processes import Supervisor
from headroom.demo.scrape import Samples, by_label, scrape, total
from headroom.demo.settings import DemoSettings
from headroom.demo.stats import summarize
from headroom.localkafka import broker
from headroom.localkafka.admin import end_offsets
from headroom.localkafka.cli import start as start_broker
from headroom.localkafka.settings import BrokerSettings
from headroom.sim.traces import load_azure

WARMUP_SHARE = 0.4  # the first 40% of the run may take the heuristic while models are first trained
SLOWED_POOL = "h100"  # the regime change: every server of this pool slows down (say, a bad driver roll-out)


@dataclass
class Ports:
    base: int

    def __post_init__(self) -> None:
        self.worker_metrics = self.base
        self.predictor = self.base + 1
        self.predictor_metrics = self.base + 2
        self.router_http = self.base + 3
        self.router_pick = self.base + 4
        self.router_ext_proc = self.base + 5
        self.servers = self.base + 10  # consecutive, one per simulated server


@dataclass(frozen=True)
class Tick:
    """What the live view shows each second."""

    elapsed: float
    change_at: float
    outcomes: list[load.ClientOutcome]
    router: Samples
    worker: Samples


@dataclass
class Report:
    settings: dict
    summary: dict
    before_change: dict
    after_change: dict
    telemetry_in_kafka: int
    model_versions: dict[str, float]
    promotions: float
    drift_events: dict[str, float]
    drift_events_before_change: float
    fallbacks: dict[str, float]
    decisions: dict[str, float]
    fallback_share_after_warmup: float
    processes_left: list[str] = field(default_factory=list)
    seconds: float = 0.0


def run(settings: DemoSettings, trace: Path, on_tick: Callable[[Tick], None] | None = None) -> Report:
    began = time.monotonic()
    shutil.rmtree(settings.state_dir, ignore_errors=True)
    ports = Ports(settings.base_port)
    broker_settings = from_env(BrokerSettings, state_dir=settings.state_dir)
    start_broker(broker_settings)
    kafka = from_env(KafkaSettings, bootstrap_servers=broker_settings.bootstrap)
    supervisor = Supervisor(settings.state_dir / "logs", env={
        "HEADROOM_KAFKA_BOOTSTRAP": kafka.bootstrap_servers,
        "HEADROOM_STATE_DIR": str(settings.state_dir),
        "HEADROOM_PIPELINE_DATA_DIR": str(settings.state_dir / "pipeline"),
        # A short run: first models from fewer samples; periodic retraining is slower than the default, so it
        # is the drift detector, not the clock, that answers the regime change.
        "HEADROOM_RETRAIN_MIN_SAMPLES": str(settings.min_samples),
        "HEADROOM_RETRAIN_INTERVAL": str(settings.retrain_interval_s)})
    try:
        servers = _start_pool(supervisor, settings, ports)
        supervisor.start("worker", ["worker", "start", "--app-id", "headroom-demo",
                                    "--metrics-port", str(ports.worker_metrics), "--log-level", "info"],
                         ready=_answers(f"http://127.0.0.1:{ports.worker_metrics}/metrics"))
        supervisor.start("predictor", ["predictor", "serve", "--port", str(ports.predictor),
                                       "--metrics-port", str(ports.predictor_metrics)],
                         ready=_answers(f"http://127.0.0.1:{ports.predictor_metrics}/metrics"))
        config = _router_config(settings, ports, servers)
        supervisor.start("router", ["router", "serve", "--config", str(config)],
                         ready=_answers(f"http://127.0.0.1:{ports.router_http}/metrics"))
        start_offsets = end_offsets(kafka, kafka.telemetry_topic)
        outcomes, change_at, timeline = _drive(settings, trace, ports, servers, supervisor, on_tick)
        supervisor.check()
        router_metrics = scrape(f"http://127.0.0.1:{ports.router_http}/metrics")
        telemetry = _wait_for_telemetry(kafka, start_offsets, sum(o.status == 200 for o in outcomes))
        worker_metrics = scrape(f"http://127.0.0.1:{ports.worker_metrics}/metrics")
    finally:
        started = list(supervisor.components)
        supervisor.stop()
        broker.down(broker_settings)
    left = [c.name for c in started if c.process.poll() is None]
    decisions = by_label(router_metrics, "headroom_router_decisions_total", "profile")
    return Report(
        settings={k: str(v) for k, v in asdict(settings).items()},
        summary=asdict(summarize(outcomes, settings.duration_s)),
        before_change=asdict(summarize([o for o in outcomes if o.sent_at < change_at], change_at)),
        after_change=asdict(summarize([o for o in outcomes if o.sent_at >= change_at],
                                      settings.duration_s - change_at)),
        telemetry_in_kafka=telemetry,
        model_versions={"/".join(labels.values()): value
                        for labels, value in router_metrics.get("headroom_router_model_version", [])},
        promotions=total(worker_metrics, "headroom_model_promotions_total"),
        drift_events=by_label(worker_metrics, "headroom_drift_events_total", "target"),
        drift_events_before_change=_drift_events_by(timeline, change_at),
        fallbacks=by_label(router_metrics, "headroom_router_heuristic_decisions_total", "reason"),
        decisions=decisions,
        fallback_share_after_warmup=_fallback_share(timeline, settings.duration_s * WARMUP_SHARE, router_metrics),
        processes_left=left, seconds=time.monotonic() - began)


def heuristic_decisions(samples: Samples) -> float:
    """Decisions the heuristic profile made; every demo request asks for prediction, so these fell back."""
    return total(samples, "headroom_router_decisions_total", profile="heuristic")


def _fallback_share(timeline: list[Tick], after_s: float, final: Samples) -> float:
    """Share of scheduling decisions that fell back to the heuristic after the warm-up."""
    start = next((t.router for t in timeline if t.elapsed >= after_s), None)
    if start is None:
        return float("nan")
    decided = total(final, "headroom_router_decisions_total") - total(start, "headroom_router_decisions_total")
    fell_back = heuristic_decisions(final) - heuristic_decisions(start)
    return fell_back / decided if decided else float("nan")


def _drift_events_by(timeline: list[Tick], at_s: float) -> float:
    """Drift events the worker had counted by ``at_s`` seconds into the load."""
    seen = [t.worker for t in timeline if t.elapsed <= at_s]
    return total(seen[-1], "headroom_drift_events_total") if seen else 0.0


def _start_pool(supervisor: Supervisor, settings: DemoSettings, ports: Ports) -> list[tuple[str, str, str]]:
    """Start the simulated servers; returns (id, address, pool key) of each."""
    servers = []
    for kind, count, offset in (("h100", settings.fast_servers, 0), ("a100", settings.slow_servers,
                                                                       settings.fast_servers)):
        if count == 0:
            continue
        first = ports.servers + offset
        addresses = [f"127.0.0.1:{first + i}" for i in range(count)]
        supervisor.start(f"sim-{kind}", ["sim", "serve", "--servers", str(count), "--server-type", kind,
                                         "--base-port", str(first), "--seed", str(settings.seed + offset)],
                         ready=lambda addresses=addresses: all(_answers(f"http://{a}/health")() for a in addresses))
        servers += [(f"{kind}-{i}", address, kind) for i, address in enumerate(addresses)]
    return servers


def _router_config(settings: DemoSettings, ports: Ports, servers: list[tuple[str, str, str]]) -> Path:
    config = {"settings": {"httpPort": ports.router_http, "pickPort": ports.router_pick,
                           "extProcPort": ports.router_ext_proc, "seed": settings.seed, "predictor": "remote",
                           "predictorAddresses": f"127.0.0.1:{ports.predictor}"},
              "servers": [{"id": sid, "address": address, "pool": pool} for sid, address, pool in servers]}
    path = settings.state_dir / "router.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _drive(settings: DemoSettings, trace: Path, ports: Ports, servers: list[tuple[str, str, str]],
           supervisor: Supervisor, on_tick: Callable[[Tick], None] | None
           ) -> tuple[list[load.ClientOutcome], float, list[Tick]]:
    requests = load_azure(trace, rate=settings.rate, seed=settings.seed,
                          limit=int(settings.rate * settings.duration_s * 1.2) + 10)
    dressed = load.dress([r for r in requests if r.arrival_s < settings.duration_s], load.Mix(seed=settings.seed))
    change_at = settings.duration_s * settings.regime_change_at
    outcomes: list[load.ClientOutcome] = []
    timeline: list[Tick] = []

    async def main() -> list[load.ClientOutcome]:
        async def regime_change() -> None:
            await asyncio.sleep(change_at)
            for _, address, pool in servers:
                if pool == SLOWED_POOL:
                    await asyncio.to_thread(_slow_down, address, settings.slowdown)

        async def ticks() -> None:
            began = time.monotonic()
            while True:
                await asyncio.sleep(1.0)
                supervisor.check()
                tick = Tick(time.monotonic() - began, change_at, outcomes,
                            await asyncio.to_thread(scrape, f"http://127.0.0.1:{ports.router_http}/metrics"),
                            await asyncio.to_thread(scrape, f"http://127.0.0.1:{ports.worker_metrics}/metrics"))
                timeline.append(tick)
                if on_tick:
                    on_tick(tick)

        side = [asyncio.create_task(regime_change()), asyncio.create_task(ticks())]
        try:
            return await load.drive(f"http://127.0.0.1:{ports.router_http}", dressed,
                                    max_seconds=settings.duration_s, on_outcome=outcomes.append)
        finally:
            for task in side:
                task.cancel()

    return asyncio.run(main()), change_at, timeline


def _slow_down(address: str, factor: float) -> None:
    request = urllib.request.Request(f"http://{address}/admin/slowdown", method="POST",
                                     data=json.dumps({"factor": factor}).encode(),
                                     headers={"content-type": "application/json"})
    urllib.request.urlopen(request, timeout=5).close()


def _answers(url: str) -> Callable[[], bool]:
    def check() -> bool:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    return check


def _wait_for_telemetry(kafka: KafkaSettings, start: dict[int, int], expected: int, timeout_s: float = 20.0) -> int:
    """Records the run added to the telemetry topic, once it reaches ``expected`` or stops growing."""
    deadline = time.monotonic() + timeout_s
    count = 0
    while time.monotonic() < deadline:
        ends = end_offsets(kafka, kafka.telemetry_topic)
        count = sum(end - start.get(p, 0) for p, end in ends.items())
        if count >= expected:
            break
        time.sleep(0.5)
    return count


def write_report(report: Report, directory: Path) -> Path:
    """``demo.json`` (every number) and ``demo.md`` (the same, for people); returns the Markdown path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "demo.json").write_text(json.dumps(asdict(report), indent=2, default=str))
    rows = [("whole run", report.summary), ("before the regime change", report.before_change),
            ("after the regime change", report.after_change)]
    lines = ["# headroom demo", "", f"Settings: {report.settings}", "",
             "| phase | req/s | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | SLO attained | shed | failed |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in rows:
        lines.append(f"| {name} | {s['rate_per_s']:.1f} | {s['ttft_p50_ms']:.0f} | {s['ttft_p99_ms']:.0f} | "
                     f"{s['tpot_p50_ms']:.1f} | {s['tpot_p99_ms']:.1f} | {s['slo_attainment']:.1%} | "
                     f"{s['rejected']} | {s['failed']} |")
    lines += ["", f"- telemetry records in Kafka: {report.telemetry_in_kafka} "
              f"(requests completed: {report.summary['completed']})",
              f"- model versions promoted by the worker: {report.promotions:.0f}",
              f"- models in use by the router at the end: {report.model_versions}",
              f"- drift events: {report.drift_events} ({report.drift_events_before_change:.0f} before the change)",
              f"- fallback share after warm-up: {report.fallback_share_after_warmup:.1%}",
              f"- scheduling decisions by profile: {report.decisions}",
              f"- fallbacks by reason: {report.fallbacks}",
              f"- processes left running: {report.processes_left or 'none'}",
              f"- wall time: {report.seconds:.0f} s", ""]
    (directory / "demo.md").write_text("\n".join(lines))
    return directory / "demo.md"
