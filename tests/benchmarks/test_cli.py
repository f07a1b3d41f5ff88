from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
from pathlib import Path

import pytest

from headroom.benchmarks.cli import register
from headroom.errors import CommandError


def _invoke(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["bench", *argv])
    return args.run(args)


def test_sim_bench_runs_each_policy(capsys) -> None:
    assert _invoke("sim", "--traces", "azure", "--limit", "200", "--servers", "2",
                   "--policies", "round-robin,least-queue") == 0
    printed = capsys.readouterr().out
    assert "round-robin" in printed and "least-queue" in printed


def test_router_bench_decides_with_and_without_a_predictor(capsys) -> None:
    assert _invoke("router", "--candidates", "4", "--decisions", "50", "--trees", "5", "--slo") == 0
    embedded = capsys.readouterr().out
    assert _invoke("router", "--candidates", "4", "--decisions", "50", "--slo", "--predictor", "none") == 0
    heuristic = capsys.readouterr().out
    assert "predictor none" in heuristic and "heuristic profile" in heuristic and "trees" not in heuristic
    assert "predictor none" not in embedded and "trees" in embedded
    assert "prediction call alone" in embedded


def test_predictor_http_bench_measures_each_api_on_the_bench_models(capsys) -> None:
    assert _invoke("predictor", "http", "--seconds", "0.3", "--rounds", "1", "--clients", "1",
                   "--candidates", "10") == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    measured = [row for row in rows if "round" in row]
    assert {row["api"] for row in measured} == {"grpc", "grpc-raw", "http"}
    assert all(row["calls"] > 0 and row["failed"] == 0 for row in measured)


@pytest.mark.parametrize("argv, message", [
    (("sim", "--traces", "nope", "--limit", "10"), "cannot tell the format of trace 'nope'"),
    (("router", "--candidates", "0"), "must be positive"),
    (("proxy", "--concurrency", "32", "0"), "must be positive"),
    (("ext-proc", "--servers", "0"), "must be positive"),
    (("ext-proc", "--floor", "iterator", "nope"), "unknown --floor variants \\['nope'\\]"),
    (("ext-proc", "--in-process", "0"), "--in-process must be positive"),
    (("ext-proc", "--in-process", "-5"), "--in-process must be positive"),
    (("ext-proc", "--versus-epp", "epp-default", "nope"), "unknown --versus-epp arms \\['nope'\\]"),
], ids=["trace", "router-candidates", "proxy-concurrency", "ext-proc-servers", "ext-proc-floor-variant",
        "ext-proc-in-process-zero", "ext-proc-in-process-negative", "ext-proc-versus-arm"])
def test_user_errors_are_command_errors(argv, message) -> None:
    with pytest.raises(CommandError, match=message):
        _invoke(*argv)


def test_proxy_summary_pairs_runs_of_a_round_and_takes_medians() -> None:
    from headroom.benchmarks.proxy import Run, summarize

    def run(path, round_, rps, p99, cpu=0.0):
        return Run(path, 128, False, round_, rps, 10.0, p99, 0, 0, cpu, 0.0, 0.1 * (round_ + 1), 0.02)

    runs = [run("direct", 0, 1000, 50), run("proxied", 0, 900, 53, 0.4),
            run("proxied", 1, 400, 90, 0.6), run("direct", 1, 800, 60),  # round 1 measured in the other order
            run("direct", 2, 1000, 50), run("proxied", 2, 700, 80, 0.5)]
    (row,) = summarize(runs)
    assert row["rounds"] == 3
    assert row["throughput_ratio"] == 0.7  # median of 0.9, 0.5, 0.7
    assert row["round_ratios"] == [0.9, 0.5, 0.7] and row["round_added_p99_ms"] == [3.0, 30.0, 30.0]
    assert row["added_p99_ms"] == 30.0  # median of 3, 30, 30
    assert row["router_cpu_ms_per_request"] == 0.5
    assert row["direct_pool_load_cpu_ms_per_request"] == pytest.approx(0.22)  # median of 0.12, 0.22, 0.32


def test_proxy_stream_tokens_below_zero_are_refused(monkeypatch) -> None:
    monkeypatch.setattr("headroom.benchmarks.proxy.bench_proxy", lambda *a, **k: pytest.fail("the bench ran"))
    with pytest.raises(CommandError, match="--stream-tokens must not be negative"):
        _invoke("proxy", "--stream-tokens", "-1")


def test_proxy_pin_is_refused_on_one_cpu(monkeypatch) -> None:
    def never(*args, **kwargs):
        raise AssertionError("--pin on one CPU ran the bench")
    monkeypatch.setattr("headroom.benchmarks.proxy.bench_proxy", never)
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})
    try:
        with pytest.raises(CommandError, match="--pin: a router CPU of its own needs 2 CPUs or more; this process may run on 1"):
            _invoke("proxy", "--pin")
    finally:
        os.sched_setaffinity(0, allowed)


def thread_cpus(pid: int) -> dict[str, frozenset[int]]:
    """The CPUs each live thread of process ``pid`` may run on (a thread that ended meanwhile is left out)."""
    found = {}
    for thread in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            found[thread.name] = frozenset(os.sched_getaffinity(int(thread.name)))
    return found


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs 2 CPUs")
def test_pinned_router_and_pool_run_every_thread_on_their_own_cpus(tmp_path) -> None:
    from headroom.benchmarks.live import split_cpus, start_pool, start_router

    router_cpus, others = split_cpus()
    assert router_cpus.isdisjoint(others) and router_cpus | others == os.sched_getaffinity(0)
    pool, addresses = start_pool(2, cpus=others)
    try:
        router, _ = start_router(addresses, tmp_path, predictor="none", cpus=router_cpus)
        try:
            assert len(thread_cpus(router.popen.pid)) > 1  # the threads it started inherit its CPUs
            for process, cpus in ((pool, others), (router, router_cpus)):
                assert set(thread_cpus(process.popen.pid).values()) == {frozenset(cpus)}
        finally:
            router.stop()
    finally:
        pool.stop()


def test_ext_proc_floor_serves_an_empty_servicer_and_splits_its_cost(capsys) -> None:
    assert _invoke("ext-proc", "--floor", "iterator", "--rounds", "1", "--seconds", "0.2", "--streams", "2") == 0
    result = json.loads(capsys.readouterr().out)
    assert list(result["cpu_ms_per_exchange"]) == ["iterator"]
    assert 0 < result["cpu_ms_per_exchange"]["iterator"] < math.inf
    samples = result["samples"]
    assert set(samples) == {"iterator", "iterator ×1", "iterator ×8"}
    assert all(len(values) == 1 and 0 < values[0] < math.inf for values in samples.values())  # one round
    split = result["split"]
    assert split["variant"] == "iterator" and math.isfinite(split["per_message_ms"])
    assert split["per_message_ms"] == pytest.approx((samples["iterator ×8"][0] - samples["iterator ×1"][0]) / 7,
                                                    abs=0.001)
    assert split["per_stream_ms"] + split["per_message_ms"] == pytest.approx(samples["iterator ×1"][0], abs=0.002)


def test_ext_proc_floor_without_go_refuses_before_any_round(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no `go`, and no grpc-go servicer built before
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(CommandError, match="go-grpc cannot run: building ext_proc_go needs the Go toolchain"):
        _invoke("ext-proc", "--floor", "iterator", "go-grpc", "--rounds", "1", "--seconds", "0.2", "--streams", "2")


def test_ext_proc_in_process_routes_every_exchange(capsys) -> None:
    assert _invoke("ext-proc", "--in-process", "50", "--servers", "4", "--predictor", "none") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["exchanges"] == 50 and result["refused"] == 0 and result["exchanges_per_cpu_s"] > 0


def test_ext_proc_bench_plays_envoys_full_duplex_exchange_against_a_live_router(capsys) -> None:
    assert _invoke("ext-proc", "--servers", "2", "--streams", "2", "--seconds", "0.3", "--predictor", "none") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["decisions"] > 0 and result["rejected"] == 0 and result["decisions_per_cpu_s"] > 0
