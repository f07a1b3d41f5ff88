"""Two identical pools under the same arrivals, on real processes: the harness of ``headroom demo`` and of the
live regime-change benchmark.

:class:`TwoArms` starts a Kafka broker, the simulated servers (one ``sim serve`` process per server type, both
arms' servers of that type in it), the learning worker and a router per arm — **headroom** (predicted latency,
with the models learned from its own telemetry embedded, as a router runs by default) and **baseline** (the
heuristic profile alone; its requests opt out of prediction and it sends no telemetry). Each router reads its servers from a file it polls
(:mod:`router.state.servers`), so the pool's membership can change under load (:meth:`TwoArms.route_to`);
servers may run that no router routes to yet. :meth:`TwoArms.drive` sends the same requests through both arms
and runs timed events (a slowdown, a KV change, a membership change) as the load goes on;
:func:`change_events` makes a :class:`~sim.scenarios.Scenario`'s change such an event. The run makes its own
model-signing key pair: the worker signs with it, headroom's router trusts it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from headroom.certificates import write_signing_key
from headroom.contract.settings import from_env
from headroom.contract.signing import SigningKey
from headroom.contract.topics import KafkaSettings
from headroom.demo import load
from headroom.demo.processes import Supervisor
from headroom.kafka_topics import end_offsets
from headroom.localkafka import broker
from headroom.localkafka.cli import start as start_broker
from headroom.localkafka.settings import BrokerSettings
from headroom.router.control.headers import OPT_OUT
from headroom.sim.profile import profile
from headroom.sim.request import SimRequest
from headroom.sim.scenarios import KvShrink, Replace, Scenario, Slowdown, server_type

ARMS = ("headroom", "baseline")
Server = tuple[str, str, str]  # id, host:port, pool key (its type)
Event = tuple[float, Callable[[], None]]  # seconds into the load, what happens then (blocking)


@dataclass
class Ports:
    base: int

    def __post_init__(self) -> None:
        self.worker_metrics = self.base
        self.router_http = self.base + 3  # headroom's arm
        self.router_pick = self.base + 4
        self.router_ext_proc = self.base + 5
        self.baseline_http = self.base + 6
        self.servers = self.base + 10  # consecutive: each pool type's servers, headroom's arm first

    def all(self, servers: int) -> list[int]:
        return [*range(self.base, self.base + 7), *range(self.servers, self.servers + servers)]

    def http(self, arm: str) -> int:
        return self.router_http if arm == "headroom" else self.baseline_http


@dataclass(frozen=True)
class Layout:
    """Each arm's servers as ``(type, count)`` (ids ``{type}-{i}``), run ``time_scale`` times as fast as the type's
    hardware; ``routed`` names the servers the routers start with (None: all)."""

    types: tuple[tuple[str, int], ...]
    time_scale: float = 1.0
    routed: tuple[str, ...] | None = None

    @property
    def count(self) -> int:
        return sum(n for _, n in self.types)

    @classmethod
    def of(cls, s: Scenario) -> Layout:
        """Every server scenario ``s`` uses, by type in the order they first appear; the routers start with its
        pool."""
        counts = Counter(server_type(sid) for sid in s.servers)
        for sid in s.servers:
            kind, _, index = sid.rpartition("-")
            if not index.isdigit() or int(index) >= counts[kind]:
                raise ValueError(f"scenario {s.name!r}: live servers are named {kind}-0 … {kind}-{counts[kind] - 1}, "
                                 f"not {sid}")
        return cls(tuple(counts.items()), s.time_scale, s.pool)


class TwoArms:
    def __init__(self, state_dir: Path, base_port: int, seed: int, layout: Layout, *, min_samples: int,
                 retrain_interval_s: float, on_ready: Callable[[str, float], None] | None = None):
        self.state_dir, self.seed, self.layout, self.on_ready = state_dir, seed, layout, on_ready
        self.ports = Ports(base_port)
        self.broker = from_env(BrokerSettings, state_dir=state_dir)
        self.kafka = from_env(KafkaSettings, bootstrap_servers=self.broker.bootstrap)
        self.supervisor = Supervisor(state_dir / "logs", env={
            "HEADROOM_KAFKA_BOOTSTRAP": self.kafka.bootstrap_servers,
            "HEADROOM_STATE_DIR": str(state_dir),
            "HEADROOM_PIPELINE_DATA_DIR": str(state_dir / "pipeline"),
            # A short run: first models from fewer samples; periodic retraining is slower than the default, so it
            # is the drift detector, not the clock, that answers a regime change.
            "HEADROOM_RETRAIN_MIN_SAMPLES": str(min_samples),
            "HEADROOM_RETRAIN_INTERVAL": str(retrain_interval_s)})
        self.ready: dict[str, float] = {}
        self.servers = self._servers()
        self.start_offsets: dict[int, int] | None = None
        self.broker_started = False

    @property
    def server_count(self) -> int:
        return len(ARMS) * self.layout.count

    def start(self) -> None:
        """The broker, then every other component at once; ``on_ready`` as each becomes ready."""
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self.supervisor.env.update(_signing_keys(self.state_dir / "signing"))
        started = time.monotonic()
        self.broker_started = True
        start_broker(self.broker)
        self._ready("Kafka broker", time.monotonic() - started)
        self.route_to(self.layout.routed)
        specs = [*self._pools(), ("worker", ["worker", "start", "--app-id", "headroom-demo", "--metrics-port",
                                             str(self.ports.worker_metrics), "--log-level", "info"],
                                  answers(f"http://127.0.0.1:{self.ports.worker_metrics}/metrics"))]
        for arm in ARMS:
            specs.append((f"router ({arm})", ["router", "serve", "--config", str(self._router_config(arm))],
                          answers(f"http://127.0.0.1:{self.ports.http(arm)}/metrics")))
        self.supervisor.start_all(specs, on_ready=lambda component, seconds: self._ready(component.name, seconds))
        self.start_offsets = end_offsets(self.kafka, self.kafka.telemetry_topic)

    def route_to(self, server_ids: Sequence[str] | None) -> None:
        """Have both routers route to these servers (None: all), through the files they poll."""
        for arm, servers in self.servers.items():
            chosen = [s for s in servers if server_ids is None or s[0] in server_ids]
            path = self._servers_file(arm)
            path.parent.mkdir(parents=True, exist_ok=True)
            staged = path.with_suffix(".tmp")
            staged.write_text(yaml.safe_dump({"servers": [{"id": sid, "address": address, "pool": pool}
                                                          for sid, address, pool in chosen]}, sort_keys=False))
            os.replace(staged, path)  # a router never reads half a file

    def admin(self, server_id: str, action: str, body: dict[str, Any]) -> None:
        """``POST /admin/{action}`` with ``body`` to the server ``server_id`` of both arms."""
        for servers in self.servers.values():
            for sid, address, _ in servers:
                if sid == server_id:
                    post_json(f"http://{address}/admin/{action}", body)

    def drive(self, dressed: Sequence[tuple[SimRequest, dict[str, str]]], seconds: float, events: Sequence[Event],
              on_outcome: Callable[[load.ClientOutcome], None],
              every_second: Callable[[float], None] | None = None) -> None:
        """The requests through both arms at once (for at most ``seconds``), each event at its time (on a thread
        of its own, so that a client falling behind its arrivals does not delay it), and ``every_second(elapsed)``
        once a second."""
        arms = [load.Arm("headroom", f"http://127.0.0.1:{self.ports.router_http}"),
                load.Arm("baseline", f"http://127.0.0.1:{self.ports.baseline_http}", ((OPT_OUT, "true"),))]
        failures: list[BaseException] = []

        def guarded(what: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                try:
                    what()
                except BaseException as err:  # re-raised once the load is over
                    failures.append(err)
            return run

        timers = [threading.Timer(when, guarded(what)) for when, what in events]
        for timer in timers:
            timer.daemon = True
            timer.start()
        try:
            asyncio.run(self._drive(arms, dressed, seconds, on_outcome, every_second))
        finally:
            for timer in timers:
                timer.cancel()
        if failures:
            raise failures[0]
        self.supervisor.check()

    async def _drive(self, arms: Sequence[load.Arm], dressed: Sequence[tuple[SimRequest, dict[str, str]]],
                     seconds: float, on_outcome: Callable[[load.ClientOutcome], None],
                     every_second: Callable[[float], None] | None) -> None:
        began = time.monotonic()

        async def ticks() -> None:
            while True:
                await asyncio.sleep(1.0)
                self.supervisor.check()
                if every_second:
                    await asyncio.to_thread(every_second, time.monotonic() - began)

        side = asyncio.create_task(ticks())
        try:
            await load.drive(arms, dressed, max_seconds=seconds, on_outcome=on_outcome)
        finally:
            side.cancel()

    def stop(self) -> None:
        self.supervisor.stop()
        if self.broker_started:
            broker.down(self.broker)

    def _ready(self, name: str, seconds: float) -> None:
        self.ready[name] = round(seconds, 1)
        if self.on_ready:
            self.on_ready(name, seconds)

    def _servers(self) -> dict[str, list[Server]]:
        """Per arm, its servers: one process per type serves both arms' servers of that type."""
        out: dict[str, list[Server]] = {arm: [] for arm in ARMS}
        first = self.ports.servers
        for kind, count in self.layout.types:
            for a, arm in enumerate(ARMS):
                out[arm] += [(f"{kind}-{i}", f"127.0.0.1:{first + a * count + i}", kind) for i in range(count)]
            first += len(ARMS) * count
        return out

    def _pools(self) -> list[tuple[str, list[str], Callable[[], bool]]]:
        specs: list[tuple[str, list[str], Callable[[], bool]]] = []
        first = self.ports.servers
        for kind, count in self.layout.types:
            if count:
                addresses = [f"127.0.0.1:{first + i}" for i in range(len(ARMS) * count)]
                specs.append((f"{kind} servers ({len(ARMS)}×{count})",
                              ["sim", "serve", "--servers", str(len(ARMS) * count), "--server-type", kind,
                               "--base-port", str(first), "--seed", str(self.seed + first - self.ports.servers),
                               "--time-scale", str(self.layout.time_scale)],
                              partial(_all_answer, addresses)))
            first += len(ARMS) * count
        return specs

    def _servers_file(self, arm: str) -> Path:
        return self.state_dir / f"servers-{arm}.yaml"

    def _router_config(self, arm: str) -> Path:
        if arm == "headroom":
            settings = {"httpPort": self.ports.router_http, "pickPort": self.ports.router_pick,
                        "extProcPort": self.ports.router_ext_proc, "predictor": "embedded"}
        else:  # the heuristic profile only; its telemetry would teach the models a pool they do not route
            settings = {"httpPort": self.ports.baseline_http, "pickPort": -1, "extProcPort": -1, "predictor": "none",
                        "telemetry": False}
        config = {"settings": {**settings, "seed": self.seed}, "serversFile": self._servers_file(arm).name}
        path = self.state_dir / f"router-{arm}.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path


def change_events(s: Scenario, arms: TwoArms, made: list[dict[str, Any]]) -> list[Event]:
    """Scenario ``s``'s change, made on both arms at its time and noted in ``made`` (no event when the arrivals
    carry it: a prompt shift, a burst)."""
    change = s.change
    if isinstance(change, Slowdown):
        def act() -> None:
            for sid in change.servers:
                arms.admin(sid, "slowdown", {"factor": change.factor})
    elif isinstance(change, KvShrink):
        def act() -> None:
            arms.admin(change.server, "kv", {"blocks": change.blocks(profile(server_type(change.server)))})
    elif isinstance(change, Replace):
        def act() -> None:
            arms.route_to([sid for sid in s.pool if sid != change.remove] + [change.add])
    else:
        return []
    began = time.monotonic()

    def noted() -> None:
        start = time.monotonic() - began
        act()
        made.append({"change": change.describe(), "began_after_s": round(start, 2),
                     "done_after_s": round(time.monotonic() - began, 2)})
    return [(s.change_at_s, noted)]


def post_json(url: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(url, method="POST", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    urllib.request.urlopen(request, timeout=5).close()


def _signing_keys(directory: Path) -> dict[str, str]:
    """A fresh key pair, as the worker's key to sign with and the readers' key to trust."""
    private, public = write_signing_key(SigningKey.generate(), directory, "worker")
    return {"HEADROOM_MODEL_SIGNING_KEY_FILE": str(private), "HEADROOM_MODEL_TRUSTED_KEYS": str(public)}


def _all_answer(addresses: list[str]) -> bool:
    return all(answers(f"http://{a}/health")() for a in addresses)


def answers(url: str) -> Callable[[], bool]:
    def check() -> bool:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    return check
