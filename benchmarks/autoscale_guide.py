"""Autoscaling: the recommended autoscaler against the guide's starting points, replayed on a shared trace.

    .venv/bin/python -m headroom.benchmarks.autoscale_guide --trace azure --speedup 11 --model-server vllm

Runs ``headroom autoscale recommend`` on the trace (time-scaled by ``--speedup``; a simulated pool of
H100 servers with the chosen model server's metrics, GKE managed Prometheus naming), writes the
recommended files, reads them back and replays them with the recommendation's own settings (same warm
start and seed: the figures must equal the reported ones), then replays the guide's starting points
from the same warm start with Kubernetes' default behavior: the queue (``vllm:num_requests_waiting`` or
``jetstream_prefill_backlog_size``) at 3 and 5, and the batch "just below" full (JetStream's slots at
0.95; vLLM's running requests at 95 % of its 256 slots). One Markdown row per configuration: replica-hours,
TTFT p99 and the share of requests within the TTFT SLO.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from headroom.autoscale.bundle import autoscaler_file, bundle
from headroom.autoscale.closed_loop import LoopSettings, run_closed_loop
from headroom.autoscale.documents import load_autoscaler
from headroom.autoscale.pipelines import Pipeline
from headroom.autoscale.recommend import KUBERNETES_DEFAULT, Goal, Slo, make_autoscaler, recommend
from headroom.autoscale.servers import ModelServer
from headroom.contract.scaling_signals import Signal
from headroom.contract.settings import from_env
from headroom.sim.traces import TraceSettings, load_trace

TRACES = ("azure", "mooncake")


def guide_points(server: ModelServer) -> list[tuple[Signal, float, str]]:
    if server.kind == "jetstream":
        return [(Signal.PREFILL_BACKLOG, 3.0, "guide: prefill backlog 3"),
                (Signal.PREFILL_BACKLOG, 5.0, "guide: prefill backlog 5"),
                (Signal.SLOTS_USED, 0.95, "guide: slots used 0.95 (just below 1)")]
    return [(Signal.QUEUE_SIZE, 3.0, "guide: queue 3"), (Signal.QUEUE_SIZE, 5.0, "guide: queue 5"),
            (Signal.BATCH_SIZE, 243.2, "guide: running 243.2 (just below a full batch of 256)")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", choices=TRACES, default="azure")
    parser.add_argument("--speedup", type=float, default=1.0)
    parser.add_argument("--model-server", choices=("vllm", "jetstream"), default="vllm")
    parser.add_argument("--slo-ttft-p99-ms", type=float, default=1000.0)
    parser.add_argument("--max-replicas", type=int, default=8)
    args = parser.parse_args()
    requests = load_trace(from_env(TraceSettings).path(args.trace), speedup=args.speedup, prefixes=None)
    server = ModelServer(args.model_server)
    goal = Goal(Slo(args.slo_ttft_p99_ms), 1, args.max_replicas, Pipeline.GMP)
    started = time.perf_counter()
    result = recommend(requests, goal, LoopSettings(model_server=server))
    searched = time.perf_counter() - started
    settings = result.settings
    slo = args.slo_ttft_p99_ms
    print(f"# {args.trace} ×{args.speedup:g}, {server.label}: {len(requests)} requests over "
          f"{requests[-1].arrival_s:.0f} s, warm start {result.warm_replicas}, {len(result.evaluations)} runs "
          f"in {searched:.0f} s; exercised scaling: {result.exercised}")
    print("| configuration | replica-hours | TTFT p99 ms | TTFT within SLO | rescales |")
    print("|---|---:|---:|---:|---:|")
    if result.best is not None:
        best = result.best
        with tempfile.TemporaryDirectory() as out:
            files = bundle(best.candidate.autoscaler, best.candidate.signal, goal.pipeline, goal.workload)
            for name, text in files.items():
                (Path(out) / name).write_text(text)
            written = load_autoscaler((Path(out) / autoscaler_file(goal.pipeline)).read_text())
        replay = run_closed_loop(written, requests, settings)
        same = (replay.replica_hours, replay.ttft_quantile(0.99), replay.ttft_attainment(slo)) == (
            best.replica_hours, best.ttft_p99_ms, best.attainment)
        name = f"recommended: {best.candidate.signal.value} {best.candidate.target_text}, {best.candidate.behavior}"
        print(f"| **{name}** (written file replayed; equals the report: {same}) | {replay.replica_hours:.3f} | "
              f"{replay.ttft_quantile(0.99):.0f} | {replay.ttft_attainment(slo):.2%} | {replay.rescales} |")
    for signal, target, name in guide_points(server):
        run = run_closed_loop(make_autoscaler(signal, target, KUBERNETES_DEFAULT, goal), requests, settings)
        print(f"| {name} | {run.replica_hours:.3f} | {run.ttft_quantile(0.99):.0f} | "
              f"{run.ttft_attainment(slo):.2%} | {run.rescales} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
