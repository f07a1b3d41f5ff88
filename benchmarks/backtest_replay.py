"""Backtest replay speed: records/s from a telemetry topic to a finished prequential report.

    .venv/bin/python -m headroom.benchmarks.backtest_replay [--records 100000] [--bootstrap HOST:PORT] [--policies ...]
        [--read-repeats 3] [--workers N] [--processes 1,2] [--repeats 1]

Fills a fresh telemetry topic with a simulator run (a pool of servers routed by least-queue, each record
carrying a fixed prediction so the drift detectors have residuals), then runs ``headroom backtest run``'s
code over it with the pipeline's default settings and prints the time of each stage: reading from Kafka
into polars, feature preparation (the model feature matrix and targets of every record), the per-record
replay of windows, drift detectors and triggers, training rounds, scoring, and writing the report. Before
that, ``--read-repeats`` more reads with feature preparation alone are timed (with ``--workers``
consumers). Without ``--bootstrap`` a local broker is started in a temporary folder and stopped afterwards.

``--processes 1,2`` runs the backtest once per count of training processes, in turn, ``--repeats`` times over
(interleaved, on the same topic), and prints each run's table, the ratio of each count's training throughput
(rounds per second of the replay and training stages together) and of its topic-to-report time to the first
count's, and the load average before and after.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
import uuid
from pathlib import Path

from rich.console import Console

from headroom import kafka_clients, kafka_topics
from headroom.backtest.prequential import prepare
from headroom.backtest.replay import WORKERS, Range, Source, read_telemetry
from headroom.backtest.result import Backtest
from headroom.backtest.run import run_backtest
from headroom.backtest.settings import BacktestSettings
from headroom.contract.settings import from_env
from headroom.contract.signing import TrustedKeys
from headroom.contract.telemetry import TelemetryRecord, encode, partition_key
from headroom.contract.topics import KafkaSettings, TopicSpec
from headroom.localkafka import broker
from headroom.localkafka.settings import BrokerSettings
from headroom.ports import free_port
from headroom.sim.policies import policy
from headroom.sim.pool import run, uniform_pool
from headroom.sim.request import SimRequest
from headroom.sim.synthetic import generate, poisson_arrivals
from headroom.sim.view import Pick, PoolView
from headroom.streams.settings import PipelineSettings


def simulated(records: int, rate: float, servers: int) -> list[TelemetryRecord]:
    requests = generate(poisson_arrivals(rate, records / rate, seed=3), stream_fraction=0.8, seed=3,
                        slo_ttft_ms=500.0, slo_tpot_ms=40.0)[:records]
    least_queue = policy("least-queue")

    def pick(request: SimRequest, view: PoolView) -> Pick:
        server = least_queue(request, view)
        if not isinstance(server, str):
            raise TypeError(f"least-queue answered {server!r}, not a server id")
        return Pick(server, predicted_ttft_ms=60.0, predicted_tpot_ms=12.0,
                    predicted_e2e_ms=1500.0, model_versions={"ttft": 1, "tpot": 1, "e2e": 1})

    return run(requests, uniform_pool(servers), pick, seed=3).records


def fill(kafka: KafkaSettings, records: list[TelemetryRecord]) -> None:
    kafka_topics.ensure_topics(kafka, [TopicSpec(kafka.telemetry_topic, 4, {}), TopicSpec(kafka.model_topic, 1, {})])
    producer = kafka_clients.producer(kafka, {"linger.ms": 20, "enable.idempotence": True,
                                                       "queue.buffering.max.messages": 1_000_000})
    for i, record in enumerate(records):  # one pool: dealt out over the partitions, to time parallel reads
        producer.produce(kafka.telemetry_topic, key=partition_key(record), value=encode(record), partition=i % 4,
                         timestamp=int(record.completion_ts * 1000))
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("the telemetry did not reach the broker")


def rate(result: Backtest) -> float:
    """Training rounds per second of the replay and training stages together (with several processes, rounds are
    fitted while the replay goes on, so neither stage alone is the time they took)."""
    return result.prequential.rounds.height / max(result.seconds["replay"] + result.seconds["training"], 1e-9)


def table(count: int, result: Backtest, total: float, cpu: float, load: list[str]) -> None:
    n = result.records.height
    s = result.seconds
    rounds = result.prequential.rounds
    print(f"# {n} records, {len(rounds)} training rounds ({int(rounds['promoted'].sum())} promoted), "
          f"{result.prequential.drifts.height} drift detections; pipeline settings: defaults; "
          f"{count or 'one per core'} training process(es), "
          f"{result.prequential.training_cpu_seconds:.1f} CPU-s fitting rounds (all processes), "
          f"{cpu:.1f} CPU-s in the replaying process (all its threads, its own fitting included); "
          f"load average at its start {' '.join(load)}")
    print("| stage | seconds | records/s |")
    print("|---|---:|---:|")
    for stage in ("read", "prepare", "replay", "training", "scoring", "published", "policies", "report"):
        print(f"| {stage} | {s[stage]:.2f} | {n / s[stage]:,.0f} |" if s[stage] > 0 else f"| {stage} | 0 | – |")
    print(f"| read + prepare | {s['read'] + s['prepare']:.2f} | {n / (s['read'] + s['prepare']):,.0f} |")
    print(f"| topic → finished report | {total:.2f} | {n / total:,.0f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=200.0, help="simulated arrivals per second")
    parser.add_argument("--servers", type=int, default=16)
    parser.add_argument("--bootstrap", help="an existing broker (default: start one)")
    parser.add_argument("--policies", default="", help="also compare these simulator policies")
    parser.add_argument("--read-repeats", type=int, default=3, help="extra timed reads + preparations alone")
    parser.add_argument("--workers", type=int, default=WORKERS, help="consumers of those extra reads")
    parser.add_argument("--processes", default="0",
                        help="comma-separated counts of training processes, run in turn (0: one per core)")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of those interleaved runs")
    args = parser.parse_args()
    counts = [int(count) for count in args.processes.split(",")]
    with tempfile.TemporaryDirectory(prefix="headroom-bench-backtest-") as folder:
        local = None
        if args.bootstrap is None:
            local = from_env(BrokerSettings, port=free_port(), controller_port=free_port(), state_dir=Path(folder))
            broker.up(local)
        try:
            bootstrap = args.bootstrap if local is None else local.bootstrap
            tag = uuid.uuid4().hex[:8]
            kafka = dataclasses.replace(from_env(KafkaSettings, {}, bootstrap_servers=bootstrap),
                                        telemetry_topic=f"bench-backtest-{tag}", model_topic=f"bench-models-{tag}")
            started = time.perf_counter()
            records = simulated(args.records, args.rate, args.servers)
            fill(kafka, records)
            print(f"# filled {kafka.telemetry_topic} (4 partitions) with {len(records)} simulator records "
                  f"in {time.perf_counter() - started:.0f} s")
            reads: list[float] = []
            read_cpu: list[float] = []
            for _ in range(args.read_repeats):
                began, began_cpu = time.perf_counter(), time.process_time()
                replay = read_telemetry(kafka, kafka.telemetry_topic, workers=args.workers)
                prepare(replay.records)
                reads.append(time.perf_counter() - began)
                read_cpu.append(time.process_time() - began_cpu)
            pipeline = from_env(PipelineSettings, {})
            trust = TrustedKeys()  # the benchmark's model topic stays empty: no key to trust
            load_before = Path("/proc/loadavg").read_text().split()[:3]
            runs = []
            for repeat in range(args.repeats):
                for count in counts:
                    settings = BacktestSettings(out_dir=Path(folder) / f"report-{count}-{repeat}",
                                                policies=args.policies, processes=count)
                    load = Path("/proc/loadavg").read_text().split()[:3]
                    started, started_cpu = time.perf_counter(), time.process_time()
                    result = run_backtest(Source(kafka, trust, Range()), pipeline, settings, Console(stderr=True))
                    runs.append((count, result, time.perf_counter() - started, time.process_time() - started_cpu, load))
            load_after = Path("/proc/loadavg").read_text().split()[:3]
        finally:
            if local is not None:
                broker.down(local)
    for count, result, total, cpu, load in runs:
        table(count, result, total, cpu, load)
    print(f"# load average (1, 5, 15 min) before the runs: {' '.join(load_before)}; after: {' '.join(load_after)}")
    for count in counts[1:]:
        pairs = [(mine, first) for mine, first in zip([r for r in runs if r[0] == count],
                                                      [r for r in runs if r[0] == counts[0]])]
        print(f"# {count} against {counts[0]} training process(es), run by run: training throughput "
              + ", ".join(f"×{rate(mine[1]) / rate(first[1]):.2f}" for mine, first in pairs)
              + "; topic → report " + ", ".join(f"×{first[2] / mine[2]:.2f}" for mine, first in pairs))
    n = runs[-1][1].records.height
    if reads:
        reads.sort()
        read_cpu.sort()
        print(f"# read + prepare alone, {len(reads)} repeats: median {n / reads[len(reads) // 2]:,.0f} records/s, "
              f"best {n / reads[0]:,.0f} records/s; median {n / read_cpu[len(read_cpu) // 2]:,.0f} records per "
              f"CPU-second of this process (all its threads, librdkafka's included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
