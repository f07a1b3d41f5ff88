"""Bounded chaos run: traffic through the router while faults are injected at random, then a ledger.

Everything runs on loopback, in a temporary folder: a Kafka broker, simulated servers (``headroom sim
serve``), two of them behind :class:`~benchmarks.fault_gate.FaultGate` s, a prediction server, a learning
worker (static group membership) and the router (remote predictor, telemetry to Kafka). A client sends
requests (streaming and not) for ``--seconds`` or ``--requests``, whichever ends first; every
``--fault-every`` seconds one fault, drawn with ``--seed`` (every kind once, in random order, then again):

- malformed, oversized (1 MB) and far-future telemetry records produced straight to the telemetry topic;
- ``kill -9`` of the worker or the predictor, restarted at once (time to recover: until the new worker
  processes records again, until the new predictor is SERVING);
- a broker restart (time to recover: until the router delivers telemetry and the worker processes it);
- a gate failing every request with 500, or hanging every request, for ``--fault-seconds``.

A component that dies on its own is restarted too, and counted. Once traffic ends the run settles (the
router's telemetry buffer empty, the worker's reader caught up), the worker stops cleanly, and
:mod:`benchmarks.chaos_ledger` reconciles: every request answered or refused with a reason, every
telemetry record in a window, in the dead-letter topic or counted by the router as not delivered.
Usage: ``python -m headroom.benchmarks.dev.chaos --seconds 180 --seed 1 --out chaos.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from confluent_kafka import Producer

from headroom import kafka_clients, kafka_topics
from headroom.benchmarks.chaos_ledger import Event, Run, committed_lag, reconcile_telemetry, report
from headroom.benchmarks.chaos_probes import answers, delivered, processed, quietly, serving, signing_keys
from headroom.benchmarks.fault_gate import FaultGate
from headroom.contract.settings import from_env
from headroom.contract.telemetry import encode
from headroom.contract.topics import KafkaSettings
from headroom.demo.processes import Component, Supervisor
from headroom.demo.scrape import scrape, total
from headroom.localkafka import broker
from headroom.localkafka.settings import BrokerSettings
from headroom.ports import free_port
from tests.contract.records import recent_record

FAULTS = ("malformed-telemetry", "oversized-telemetry", "future-telemetry", "kill-worker", "kill-predictor",
          "restart-broker", "failing-server", "hanging-server")
APP_ID = "headroom-chaos"
PREFIXES = ["You are a helpful assistant. " * 20, "Summarize the following report. " * 30, "Translate: " * 10]


class Chaos:
    def __init__(self, args: argparse.Namespace, state: Path):
        self.args, self.state = args, state
        self.rng = random.Random(args.seed)
        self.broker = from_env(BrokerSettings, {}, port=free_port(), controller_port=free_port(),
                               state_dir=state / "kafka-state")
        self.kafka = from_env(KafkaSettings, {}, bootstrap_servers=self.broker.bootstrap, telemetry_partitions=4)
        self.ports = {name: free_port() for name in ("router", "predictor", "predictor-metrics", "worker-metrics")}
        self.supervisor = Supervisor(state / "logs", env={
            "HEADROOM_KAFKA_BOOTSTRAP": self.kafka.bootstrap_servers, "HEADROOM_STATE_DIR": str(state),
            "HEADROOM_PIPELINE_DATA_DIR": str(state / "pipeline"), "HEADROOM_PIPELINE_INSTANCE_ID": "chaos-worker-0",
            "HEADROOM_RETRAIN_MIN_SAMPLES": "200", "HEADROOM_RETRAIN_INTERVAL": "10",
            # nothing leaves a window during the run, so every valid record can be found in one at the end
            "HEADROOM_WINDOW_MAX_ROWS": "1000000", "HEADROOM_WINDOW_MAX_AGE": "3600", "HEADROOM_DRIFT_MEMORY": "-1",
            **signing_keys(state)})
        self.components: dict[str, Component] = {}
        self.busy: set[str] = set()  # components a fault is killing and restarting right now
        self.gates: list[FaultGate] = []
        self.servers: list[str] = []
        self.run = Run(args.seconds, injected=dict.fromkeys(("malformed", "oversized", "future"), 0))
        self.producer: Producer | None = None  # made once the broker is up
        self.began = 0.0

    # --- components -----------------------------------------------------------------------------------
    def start(self, name: str) -> None:
        p = self.ports
        commands = {
            "worker": (["worker", "start", "--app-id", APP_ID, "--metrics-port", str(p["worker-metrics"])],
                       answers(f"http://127.0.0.1:{p['worker-metrics']}/metrics")),
            "predictor": (["predictor", "serve", "--port", str(p["predictor"]), "--metrics-port",
                           str(p["predictor-metrics"])], answers(f"http://127.0.0.1:{p['predictor-metrics']}/metrics")),
            "router": (["router", "serve", "--config", str(self.router_config())],
                       answers(f"http://127.0.0.1:{p['router']}/healthz")),
        }
        args, ready = commands[name]
        self.components[name] = self.supervisor.start(name, args, ready, timeout_s=180)

    def router_config(self) -> Path:
        config = {"settings": {"httpPort": self.ports["router"], "pickPort": -1, "extProcPort": -1, "seed": 1,
                               "predictor": "remote", "predictorAddresses": f"127.0.0.1:{self.ports['predictor']}",
                               "upstreamFirstByteTimeoutS": 3.0, "upstreamIdleTimeoutS": 5.0},
                  "servers": [{"id": f"sim-{i}", "address": a} for i, a in enumerate(self.servers)]
                  + [{"id": f"gate-{i}", "address": g.address} for i, g in enumerate(self.gates)]}
        path = self.state / "router.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def kill(self, name: str) -> None:
        os.killpg(self.components[name].process.pid, signal.SIGKILL)
        self.components[name].process.wait(10)

    async def setup(self) -> None:
        await asyncio.to_thread(broker.up, self.broker)
        await asyncio.to_thread(kafka_topics.ensure_topics, self.kafka)
        self.producer = kafka_clients.producer(self.kafka, {"message.max.bytes": 2_000_000})
        base = free_port()
        count = self.args.servers + 2
        addresses = [f"127.0.0.1:{base + i}" for i in range(count)]
        await asyncio.to_thread(self.supervisor.start, "sim", [
            "sim", "serve", "--servers", str(count), "--base-port", str(base), "--time-scale", "10", "--seed", "1"],
            lambda: all(answers(f"http://{a}/health")() for a in addresses))
        self.servers = addresses[:self.args.servers]
        self.gates = [await FaultGate(a).start() for a in addresses[self.args.servers:]]
        for name in ("worker", "predictor", "router"):
            await asyncio.to_thread(self.start, name)

    # --- traffic --------------------------------------------------------------------------------------
    async def traffic(self) -> None:
        url = f"http://127.0.0.1:{self.ports['router']}"
        deadline = self.began + self.args.seconds
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=90)) as http:
            in_flight: set[asyncio.Task[None]] = set()
            for n in range(self.args.requests):
                if time.monotonic() >= deadline:
                    break
                while len(in_flight) >= self.args.concurrency:
                    await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                task = asyncio.create_task(self.one_request(http, url, n))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                await asyncio.sleep(self.rng.expovariate(self.args.rate))
            if in_flight:
                await asyncio.wait(in_flight)

    async def one_request(self, http: aiohttp.ClientSession, url: str, n: int) -> None:
        stream = self.rng.random() < 0.7
        chat = self.rng.random() < 0.5
        text = self.rng.choice(PREFIXES) + f" request {n} " + "word " * self.rng.randint(5, 200)
        body = {"max_tokens": self.rng.randint(4, 48), "stream": stream,
                **({"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text})}
        try:
            async with http.post(f"{url}/v1/{'chat/' if chat else ''}completions", json=body,
                                 headers={"x-prediction-based-scheduling": "true"}) as response:
                raw = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError) as err:
            self.run.requests.record(None, None, False, f"{type(err).__name__}: {err}")
            return
        if stream and status == 200:
            self.run.requests.record(status, None, raw.rstrip().endswith(b"data: [DONE]"))
            return
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = raw[:200].decode(errors="replace")
        self.run.requests.record(status, doc, status != 200 or bool(isinstance(doc, dict) and doc.get("choices")))

    # --- faults ---------------------------------------------------------------------------------------
    async def inject(self) -> None:
        deadline = self.began + self.args.seconds - self.args.fault_seconds
        deck: list[str] = []
        while time.monotonic() + self.args.fault_every < deadline:
            await asyncio.sleep(self.args.fault_every)
            deck = deck or self.rng.sample(FAULTS, len(FAULTS))
            fault = deck.pop()
            event = Event(round(time.monotonic() - self.began, 1), fault)
            self.run.events.append(event)
            await getattr(self, "fault_" + fault.replace("-", "_"))(event)

    def produce(self, kind: str, value: bytes, count: int = 1) -> None:
        assert self.producer is not None
        for _ in range(count):
            self.producer.produce(self.kafka.telemetry_topic, key=b"chaos", value=value)
        self.producer.flush(30)
        self.run.injected[kind] += count

    async def fault_malformed_telemetry(self, event: Event) -> None:
        await asyncio.to_thread(self.produce, "malformed", b'\xff{"v": 1, "broken', 5)
        event.detail = "5 records that are not JSON"

    async def fault_oversized_telemetry(self, event: Event) -> None:
        await asyncio.to_thread(self.produce, "oversized", b'{"v":1,"request_id":"' + b"x" * 1_000_000 + b'"}')
        event.detail = "1 record of 1 MB"

    async def fault_future_telemetry(self, event: Event) -> None:
        now = time.time() + 1e7
        record = recent_record(request_id="from-the-future", arrival_ts=now, dispatch_ts=now, completion_ts=now + 1)
        await asyncio.to_thread(self.produce, "future", encode(record))
        event.detail = "1 valid record completed 116 days from now"

    async def restart(self, name: str) -> float:
        """``kill -9`` the component and start it again at once; returns when it was killed."""
        self.busy.add(name)
        try:
            killed = time.monotonic()
            await asyncio.to_thread(self.kill, name)
            await asyncio.to_thread(self.start, name)
            return killed
        finally:
            self.busy.discard(name)

    async def fault_kill_worker(self, event: Event) -> None:
        killed = await self.restart("worker")
        url = f"http://127.0.0.1:{self.ports['worker-metrics']}/metrics"
        await self.until(lambda: processed(url) > 0)
        event.recovered_s = round(time.monotonic() - killed, 1)

    async def fault_kill_predictor(self, event: Event) -> None:
        address = f"127.0.0.1:{self.ports['predictor']}"
        was_serving = await asyncio.to_thread(quietly, lambda: serving(address))
        killed = await self.restart("predictor")
        back = await self.until(lambda: serving(address), limit_s=60)
        event.recovered_s = round(time.monotonic() - killed, 1) if back else None
        if not was_serving:  # SERVING needs a live model: the time includes waiting for the worker's first one
            event.detail = "killed before the first model was published"

    async def fault_restart_broker(self, event: Event) -> None:
        router = f"http://127.0.0.1:{self.ports['router']}/metrics"
        worker = f"http://127.0.0.1:{self.ports['worker-metrics']}/metrics"
        stopped = time.monotonic()
        await asyncio.to_thread(broker.down, self.broker)
        await asyncio.sleep(2.0)
        await asyncio.to_thread(broker.up, self.broker)
        sent, taken = delivered(router), processed(worker)
        await self.until(lambda: delivered(router) > sent and processed(worker) > taken)
        event.recovered_s = round(time.monotonic() - stopped, 1)
        event.detail = "down for 2 s, then up on the same data"

    async def fault_failing_server(self, event: Event) -> None:
        await self.gate_fault(event, "fail")

    async def fault_hanging_server(self, event: Event) -> None:
        await self.gate_fault(event, "hang")

    async def gate_fault(self, event: Event, mode: str) -> None:
        gate = self.rng.choice(self.gates)
        gate.set_mode(mode)
        event.detail = f"gate-{self.gates.index(gate)} for {self.args.fault_seconds:g} s"
        await asyncio.sleep(self.args.fault_seconds)
        gate.set_mode("ok")

    async def until(self, condition: Callable[[], object], limit_s: float = 180.0) -> bool:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if await asyncio.to_thread(quietly, condition):
                return True
            await asyncio.sleep(0.2)
        return False

    async def watch(self) -> None:
        """Restart a component that died on its own (as Kubernetes would), and count it."""
        while True:
            await asyncio.sleep(1.0)
            for name, component in list(self.components.items()):
                if component.process.poll() is not None and name not in self.busy:
                    self.run.unplanned_exits.append(f"{name} exited with {component.process.returncode} at "
                                                    f"{time.monotonic() - self.began:.0f} s")
                    await asyncio.to_thread(self.start, name)

    # --- the run --------------------------------------------------------------------------------------
    async def main(self) -> dict[str, Any]:
        await self.setup()
        self.began = time.monotonic()
        watcher = asyncio.create_task(self.watch())
        injector = asyncio.create_task(self.inject())
        await self.traffic()
        await injector
        router, worker = (f"http://127.0.0.1:{self.ports['router']}/metrics",
                          f"http://127.0.0.1:{self.ports['worker-metrics']}/metrics")
        settled = await self.until(lambda: total(scrape(router), "headroom_router_telemetry_buffered") == 0
                                   and committed_lag(self.kafka, f"{APP_ID}-telemetry") == 0, limit_s=180)
        watcher.cancel()
        router_samples, worker_samples = scrape(router), scrape(worker)
        await asyncio.to_thread(self.stop_cleanly, "worker")
        telemetry = await asyncio.to_thread(reconcile_telemetry, self.kafka, f"{APP_ID}-windows-changelog")
        return report(self.run, self.args.seed, settled, router_samples, worker_samples, telemetry)

    def stop_cleanly(self, name: str) -> None:
        component = self.components.pop(name)
        os.killpg(component.process.pid, signal.SIGTERM)
        component.process.wait(60)

    async def close(self) -> None:
        for gate in self.gates:
            await gate.stop()
        await asyncio.to_thread(self.supervisor.stop)
        await asyncio.to_thread(broker.down, self.broker)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=180.0, help="traffic and faults, at most this long")
    parser.add_argument("--requests", type=int, default=5000, help="at most this many requests")
    parser.add_argument("--rate", type=float, default=6.0, help="requests per second (Poisson)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--servers", type=int, default=3, help="simulated servers besides the two behind gates")
    parser.add_argument("--fault-every", type=float, default=12.0)
    parser.add_argument("--fault-seconds", type=float, default=8.0, help="how long a gate fails or hangs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="headroom-chaos-") as folder:
        chaos = Chaos(args, Path(folder))

        async def go() -> dict[str, Any]:
            try:
                return await chaos.main()
            finally:
                await chaos.close()
        report = asyncio.run(go())
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
