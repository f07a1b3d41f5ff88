"""Freshness benchmark: seconds from a regime change in the simulator to a better model on ``model-updates``.

The simulator replays the Azure trace on 4 servers; at ``--change-at`` seconds every server becomes
``--slowdown`` times slower. Telemetry before the change is published first (the worker trains its
first models; then the router predicts with them, so live residuals exist); telemetry after the change
is published paced at its real rate, carrying the predictions of the models that were live at the
change. The clock starts with the first post-change record. A model counts as fresh when its window
includes post-change telemetry and it beats the pre-change model on the post-change records. Usage:
``python -m headroom.benchmarks.dev.pipeline_freshness --bootstrap 127.0.0.1:9092``.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import xgboost as xgb

from headroom import kafka_clients
from headroom.benchmarks.dev.pipeline_ingest import fresh_kafka
from headroom.contract.features import records_matrix
from headroom.contract.model_update import ModelUpdate, load_booster
from headroom.contract.telemetry import TelemetryRecord, encode, partition_key
from headroom.model_topic import read_latest, tail
from headroom.sim.capacity import capacity_rps
from headroom.sim.policies import policy
from headroom.sim.pool import run, slow_down, uniform_pool
from headroom.sim.traces import load_azure
from headroom.trainer.evaluation import score
from headroom.trainer.fit import predict
from tests.keys import TRUST
from tests.streams.worker_process import WorkerProcess


def with_predictions(records: list[TelemetryRecord], boosters: Mapping[str, xgb.Booster]) -> list[TelemetryRecord]:
    """``records``, the streams carrying the TTFT and TPOT models' predictions as a router sends them."""
    features = records_matrix(records)
    ttft, tpot = predict(boosters["ttft"], features), predict(boosters["tpot"], features)
    return [dataclasses.replace(r, predicted_ttft_ms=float(ttft[i]), predicted_tpot_ms=float(tpot[i])) if r.stream
            else r for i, r in enumerate(records)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--load", type=float, default=0.7)
    parser.add_argument("--change-at", type=float, default=100.0, help="virtual seconds into the trace")
    parser.add_argument("--slowdown", type=float, default=2.0)
    parser.add_argument("--watch", type=float, default=60.0, help="seconds to wait for a fresh model")
    args = parser.parse_args()

    capacity = capacity_rps(load_azure(limit=500)) * args.servers
    requests = load_azure(rate=args.load * capacity, limit=int(args.load * capacity * (args.change_at + args.watch)),
                          stream_fraction=0.8)
    pool = uniform_pool(args.servers)
    result = run(requests, pool, policy("composite"), actions=[(args.change_at, slow_down(s.server_id, args.slowdown))
                                                                 for s in pool])
    epoch = result.epoch_unix
    shift = time.time() - (epoch + args.change_at) - 5.0  # the change happens 5 s after the publishing starts
    records = sorted((dataclasses.replace(r, arrival_ts=r.arrival_ts + shift, dispatch_ts=r.dispatch_ts + shift,
                                          completion_ts=r.completion_ts + shift) for r in result.records),
                     key=lambda r: r.completion_ts)
    change = epoch + args.change_at + shift
    before = [r for r in records if r.dispatch_ts < change]
    after = [r for r in records if r.dispatch_ts >= change]
    kafka = fresh_kafka(args.bootstrap, 4)
    producer = kafka_clients.producer(kafka, {"linger.ms": 5})

    def publish(batch: list[TelemetryRecord]) -> None:
        for r in batch:
            producer.produce(kafka.telemetry_topic, key=partition_key(r), value=encode(r))
            producer.poll(0)
        producer.flush(30)

    with tempfile.TemporaryDirectory() as folder:
        worker = WorkerProcess(kafka, f"fresh-{uuid.uuid4().hex[:6]}", Path(folder),
                               extra_env={"HEADROOM_PIPELINE_LOG_LEVEL": "info"}).start()
        try:
            half = len(before) // 2
            publish(before[:half])
            deadline = time.monotonic() + 120
            latest: dict[str, ModelUpdate] = {}
            while time.monotonic() < deadline and not {"ttft", "tpot"} <= {k.split("/")[1] for k in latest}:
                time.sleep(1)
                latest = {k: u for k, u in read_latest(kafka, TRUST)[0].items() if k.endswith("/mean")}
            old = {u.target: u for u in latest.values()}
            boosters = {t: load_booster(u.model) for t, u in old.items() if t in ("ttft", "tpot")}
            publish(with_predictions(before[half:], boosters))
            arrivals: list[tuple[float, ModelUpdate]] = []  # (monotonic time, update) of each version published
            stop = threading.Event()

            def follow() -> None:
                for item in tail(kafka, TRUST, idle_s=None, poll_s=0.2):
                    if item.update is not None:
                        arrivals.append((time.monotonic(), item.update))
                    if stop.is_set():
                        return

            reader = threading.Thread(target=follow, daemon=True)
            reader.start()
            time.sleep(2.0)
            paced = with_predictions(after, boosters)
            t0 = time.monotonic()
            base = paced[0].dispatch_ts
            fresh = None
            for r in paced:
                wait = (r.completion_ts - base) - (time.monotonic() - t0)
                if wait > 0:
                    producer.flush(1)
                    time.sleep(wait)
                producer.produce(kafka.telemetry_topic, key=partition_key(r), value=encode(r))
                producer.poll(0)
                fresh = first_fresh(arrivals, t0, change, old["ttft"], after)
                if fresh or time.monotonic() - t0 > args.watch:
                    break
            producer.flush(10)
            while fresh is None and time.monotonic() - t0 < args.watch:
                time.sleep(0.5)
                fresh = first_fresh(arrivals, t0, change, old["ttft"], after)
            stop.set()
        finally:
            worker.stop()
    drifts = [u for _, u in arrivals if u.drift_reason]
    print(f"regime change: all {args.servers} servers {args.slowdown}x slower at {args.load:.0%} load; "
          f"pre-change models ttft v{old['ttft'].version}; {len(arrivals)} versions published after the change, "
          f"{len(drifts)} drift-triggered")
    if fresh is None:
        print(f"no fresh ttft model within {args.watch} s")
    else:
        seconds, update, old_mae, new_mae = fresh
        print(f"fresh ttft/mean v{update.version} {seconds:.1f} s after the change "
              f"({'drift: ' + update.drift_reason if update.drift_reason else 'periodic'}); "
              f"MAE on post-change telemetry {old_mae:.1f} ms (old) -> {new_mae:.1f} ms (new)")


def first_fresh(arrivals: list[tuple[float, ModelUpdate]], t0: float, change: float, old: ModelUpdate,
                after: list[TelemetryRecord]) -> tuple[float, ModelUpdate, float, float] | None:
    """(seconds, update, old MAE, new MAE) of the first post-change ttft/mean version that beats the old one."""
    stream = [r for r in after if r.stream]
    actual = np.array([r.ttft_ms for r in stream])
    features = records_matrix(stream)
    old_mae = score(actual, predict(load_booster(old.model), features)).mae
    for at, update in list(arrivals):
        if (update.key != old.key or update.version <= old.version
                or update.window_stats.get("newest_ts", 0.0) <= change):
            continue
        new_mae = score(actual, predict(load_booster(update.model), features)).mae
        if new_mae < old_mae:
            return at - t0, update, old_mae, new_mae
    return None


if __name__ == "__main__":
    main()
