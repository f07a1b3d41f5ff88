"""The router's OpenAI-compatible proxy against the same pool reached directly (``headroom bench proxy``).

A simulated pool (``headroom sim serve``) and a router over it, each in its own process; the Go load
generator (``http_load/``) drives closed-loop load at each concurrency, straight to the servers (in turn)
and through the router, the two interleaved in alternating order for ``rounds`` rounds, so both see the
same machine. Per run: requests/s, latency percentiles to the last byte, and the router's CPU time per
request (and per streamed chunk, for the streaming run), the pool's and the load generator's. The summary
gives, per concurrency, the median over rounds of the throughput ratio (proxied / direct) and of the p99
latency the proxy added.

With ``pin`` the router runs on a CPU of its own and the pool and the load generator on the others, in
both arms alike: the ratio then says whether the proxy keeps up when, as in a deployment, it has its own
core. Sharing the CPUs instead, and where they are the bottleneck, a ratio r leaves the router at most
(1/r − 1) × the direct runs' pool and load CPU per request.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headroom.benchmarks.live import (
    HTTP_LOAD_SOURCE,
    Process,
    build_go,
    children_cpu_seconds,
    load_average,
    on_cpus,
    split_cpus,
    start_pool,
    start_router,
)

PROMPT = "Summarize the following paragraph in one sentence: " + "lorem ipsum dolor sit amet " * 8


@dataclass(frozen=True)
class Run:
    path: str  # direct | proxied
    concurrency: int
    stream: bool
    round: int
    requests_per_s: float
    p50_ms: float
    p99_ms: float
    errors: int
    chunks: int
    router_cpu_ms_per_request: float  # proxied runs only
    router_cpu_us_per_chunk: float  # proxied streaming runs only
    pool_cpu_ms_per_request: float
    load_cpu_ms_per_request: float  # the load generator's


def bench_proxy(servers: int = 4, concurrencies: Sequence[int] = (32, 128), seconds: float = 5.0, rounds: int = 3,
                max_tokens: int = 8, stream_tokens: int = 64, predictor: str = "none",
                profile: Path | None = None, pin: bool = False) -> list[Run]:
    """Every run, in the order measured; the streaming run (``stream_tokens`` tokens; none when 0) is at the first
    concurrency, once per round. ``pin``: the router on a CPU of its own (:func:`split_cpus`)."""
    load = build_go(HTTP_LOAD_SOURCE, "http-load")
    router_cpus, others = split_cpus() if pin else (None, None)
    pool, addresses = start_pool(servers, cpus=others)
    runs: list[Run] = []
    router: Process | None = None
    try:
        with tempfile.TemporaryDirectory(prefix="headroom-bench-proxy-") as scratch:
            router, port = start_router(addresses, Path(scratch), predictor=predictor, profile=profile,
                                        cpus=router_cpus)
            direct = ",".join(f"http://{a}/v1/completions" for a in addresses)
            proxied = f"http://127.0.0.1:{port}/v1/completions"
            plan = [(c, False, max_tokens) for c in concurrencies]
            if stream_tokens:
                plan.append((concurrencies[0], True, stream_tokens))
            for round_ in range(rounds):
                for concurrency, stream, tokens in plan:
                    body = json.dumps({"model": "m", "prompt": PROMPT, "max_tokens": tokens, "stream": stream})
                    order = (("direct", direct), ("proxied", proxied))
                    for path, urls in order if round_ % 2 == 0 else order[::-1]:
                        runs.append(_run(load, urls, body, path, concurrency, stream, round_, seconds, router, pool,
                                         others))
            router.stop()
    finally:
        if router is not None:
            router.stop()
        pool.stop()
    return runs


def _run(load: Path, urls: str, body: str, path: str, concurrency: int, stream: bool, round_: int, seconds: float,
         router: Process, pool: Process, cpus: set[int] | None) -> Run:
    router_before, pool_before, load_before = router.cpu, pool.cpu, children_cpu_seconds()
    out = subprocess.run([str(load), "-urls", urls, "-body", body, "-concurrency", str(concurrency),
                          "-seconds", str(seconds), "-warmup", "1"], capture_output=True, text=True, check=True,
                         timeout=seconds + 120, preexec_fn=on_cpus(cpus))
    result = json.loads(out.stdout)
    sent = max(1, result["requests"] + result["errors"])
    # CPU is read over warm-up and measurement alike; the load's rate is steady, so scale by their lengths.
    share = result["seconds"] / (result["seconds"] + 1.0)
    router_cpu = (router.cpu - router_before) * share if path == "proxied" else 0.0
    return Run(path=path, concurrency=concurrency, stream=stream, round=round_,
               requests_per_s=result["requests_per_s"], p50_ms=result["p50_ms"], p99_ms=result["p99_ms"],
               errors=result["errors"], chunks=result["chunks"],
               router_cpu_ms_per_request=1000 * router_cpu / sent,
               router_cpu_us_per_chunk=1e6 * router_cpu / result["chunks"] if stream and result["chunks"] else 0.0,
               pool_cpu_ms_per_request=1000 * (pool.cpu - pool_before) * share / sent,
               load_cpu_ms_per_request=1000 * (children_cpu_seconds() - load_before) * share / sent)


def summarize(runs: Sequence[Run]) -> list[dict[str, Any]]:
    """Per (concurrency, stream): medians over rounds of proxied/direct throughput and of the added latency."""
    rows = []
    for key in sorted({(r.concurrency, r.stream) for r in runs}):
        pairs = [(d, p) for d in runs for p in runs if (d.concurrency, d.stream) == (p.concurrency, p.stream) == key
                 and d.round == p.round and (d.path, p.path) == ("direct", "proxied")]
        rows.append({
            "concurrency": key[0], "stream": key[1], "rounds": len(pairs),
            "direct_rps": statistics.median(d.requests_per_s for d, _ in pairs),
            "proxied_rps": statistics.median(p.requests_per_s for _, p in pairs),
            "throughput_ratio": statistics.median(p.requests_per_s / d.requests_per_s for d, p in pairs),
            "round_ratios": [round(p.requests_per_s / d.requests_per_s, 3) for d, p in pairs],
            "round_added_p99_ms": [round(p.p99_ms - d.p99_ms, 1) for d, p in pairs],
            "added_p50_ms": statistics.median(p.p50_ms - d.p50_ms for d, p in pairs),
            "added_p99_ms": statistics.median(p.p99_ms - d.p99_ms for d, p in pairs),
            "router_cpu_ms_per_request": statistics.median(p.router_cpu_ms_per_request for _, p in pairs),
            "router_cpu_us_per_chunk": statistics.median(p.router_cpu_us_per_chunk for _, p in pairs),
            "direct_pool_load_cpu_ms_per_request": statistics.median(
                d.pool_cpu_ms_per_request + d.load_cpu_ms_per_request for d, _ in pairs),
            "errors": sum(d.errors + p.errors for d, p in pairs)})
    return rows


def print_report(runs: Sequence[Run], started_load: str, pin: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    cpus = "the router on a CPU of its own" if pin else "all on shared CPUs"
    table = Table(title=f"proxy vs direct ({cpus}; medians over rounds; load average {started_load} → "
                        f"{load_average()})")
    for column in ("concurrency", "stream", "direct req/s", "proxied req/s", "ratio", "ratio per round",
                   "added p50 ms", "added p99 ms", "added p99 per round", "router CPU ms/req", "router CPU µs/chunk",
                   "pool+load CPU ms/req (direct)", "errors"):
        table.add_column(column, justify="right")
    for row in summarize(runs):
        table.add_row(str(row["concurrency"]), "yes" if row["stream"] else "no", f"{row['direct_rps']:.0f}",
                      f"{row['proxied_rps']:.0f}", f"{row['throughput_ratio']:.2f}",
                      " ".join(f"{r:.2f}" for r in row["round_ratios"]), f"{row['added_p50_ms']:.1f}",
                      f"{row['added_p99_ms']:.1f}", " ".join(f"{r:.1f}" for r in row["round_added_p99_ms"]),
                      f"{row['router_cpu_ms_per_request']:.3f}",
                      f"{row['router_cpu_us_per_chunk']:.1f}" if row["stream"] else "—",
                      f"{row['direct_pool_load_cpu_ms_per_request']:.3f}", str(row["errors"]))
    Console(width=160).print(table)
