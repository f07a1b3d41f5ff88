"""Trace loaders, synthetic generators and regime changes."""

from __future__ import annotations

import pytest

from headroom.contract.settings import from_env
from headroom.sim.prefixes import SharedPrefixes
from headroom.sim.synthetic import (
    Lengths,
    bursty_arrivals,
    code_completion,
    generate,
    poisson_arrivals,
    scale_rate,
    shift_prompts,
    synthetic_load,
)
from headroom.sim.traces import TraceError, TraceSettings, load_azure, load_mooncake, load_trace, trace_format


def test_azure_loads_every_row_and_rescales_to_the_target_rate() -> None:
    native = load_azure()
    assert len(native) == 19_366
    assert native[-1].arrival_s == pytest.approx(3502, abs=2)
    scaled = load_azure(rate=100.0)
    assert (len(scaled) - 1) / scaled[-1].arrival_s == pytest.approx(100.0)
    assert [r.prompt_tokens for r in scaled[:50]] == [r.prompt_tokens for r in native[:50]]


def test_azure_synthetic_prefixes_are_shared_chains_inside_the_prompt() -> None:
    requests = load_azure(limit=2000, prefixes=SharedPrefixes(count=4, min_tokens=256, max_tokens=512))
    heads = {r.prefix_hashes[0] for r in requests if r.prefix_hashes}
    assert 1 < len(heads) <= 4
    assert all(len(r.prefix_hashes) * 16 < r.prompt_tokens for r in requests)
    assert not any(r.prefix_hashes for r in load_azure(limit=50, prefixes=None))


def test_mooncake_hash_blocks_map_onto_16_token_blocks() -> None:
    requests = load_mooncake(limit=20)
    first = requests[0]
    assert first.prompt_tokens == 40_160
    assert len(first.prefix_hashes) == 40_160 // 16
    assert first.prefix_hashes[:33] == tuple(range(33))  # hash id 0 -> blocks 0..31, id 1 -> 32...
    assert first.prefix_hashes[40_000 // 16] == (40_000 // 512) * 32 + (40_000 % 512) // 16


def test_stream_fraction_is_seeded() -> None:
    flags = [r.stream for r in load_azure(limit=400, stream_fraction=0.3, seed=5)]
    assert 60 < sum(flags) < 180
    assert flags == [r.stream for r in load_azure(limit=400, stream_fraction=0.3, seed=5)]


def test_missing_trace_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        load_azure(tmp_path / "nope.csv")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0}\n')
    with pytest.raises(TraceError, match="bad.jsonl:1"):
        load_mooncake(bad)


def test_poisson_rate_step() -> None:
    times = poisson_arrivals(10.0, 200.0, seed=1, rate_steps=[(100.0, 40.0)])
    before = sum(1 for t in times if t < 100)
    assert before == pytest.approx(1000, rel=0.1)
    assert len(times) - before == pytest.approx(4000, rel=0.1)
    assert times == sorted(times)


def test_bursty_arrivals_keep_the_mean_rate_but_burst() -> None:
    times = bursty_arrivals(20.0, 2000.0, seed=2)
    assert len(times) / 2000.0 == pytest.approx(20.0, rel=0.15)
    counts = [0] * 2000
    for t in times:
        counts[int(t)] += 1
    mean = sum(counts) / len(counts)
    variance = sum((c - mean) ** 2 for c in counts) / len(counts)
    assert variance / mean > 3.0  # a Poisson process would give about 1


@pytest.mark.parametrize("kind, sigma", [("lognormal", 1.2), ("pareto", 1.3)])
def test_heavy_tailed_lengths(kind: str, sigma: float) -> None:
    import random

    rng = random.Random(0)
    draws = sorted(Lengths(500, sigma, kind, high=100_000).draw(rng) for _ in range(5000))
    assert draws[-50] > 8 * draws[2500]  # p99 far above the median


def test_prompt_shift_and_rate_scaling_change_only_the_later_requests() -> None:
    requests = generate(poisson_arrivals(5.0, 100.0, seed=3), seed=3)
    shifted = shift_prompts(requests, 50.0, 2.0)
    for old, new in zip(requests, shifted):
        expected = old.prompt_tokens * 2 if old.arrival_s >= 50.0 else old.prompt_tokens
        assert new.prompt_tokens == expected
    faster = scale_rate(requests, 2.0, from_s=50.0)
    late = [r for r in faster if r.arrival_s > 50.0]
    assert max(r.arrival_s for r in late) == pytest.approx(50.0 + (requests[-1].arrival_s - 50.0) / 2)


def test_speedup_divides_arrival_times():
    native = load_azure(limit=50, prefixes=None)
    faster = load_azure(limit=50, prefixes=None, speedup=4.0)
    assert [r.arrival_s / 4.0 for r in native] == pytest.approx([r.arrival_s for r in faster])
    with pytest.raises(TraceError, match="speedup must be positive"):
        load_azure(limit=5, speedup=0)


def _counts_per_second(requests) -> list[int]:
    counts = [0] * (int(requests[-1].arrival_s) + 1)
    for r in requests:
        counts[int(r.arrival_s)] += 1
    return counts


def test_code_completion_load_is_bursty_with_short_outputs_and_long_prompts() -> None:
    requests = code_completion(6000, seed=0)
    counts = _counts_per_second(requests)
    assert sum(counts) / len(counts) == pytest.approx(3.0, rel=0.15)
    assert 40 <= max(counts) <= 90  # bursts of tens of arrivals in one second against a mean of 3
    prompts = sorted(r.prompt_tokens for r in requests)
    outputs = sorted(r.output_tokens for r in requests)
    assert 1500 <= prompts[len(prompts) // 2] <= 2200 and 9 <= outputs[len(outputs) // 2] <= 16
    assert any(r.prefix_hashes for r in requests)
    calm = code_completion(6000, seed=0, burst_factor=1.0)
    assert max(_counts_per_second(calm)) < 20  # the same requests as a Poisson load


def test_synthetic_loads_repeat_exactly_for_a_seed() -> None:
    first, again = synthetic_load("code:burst_factor=8", 500, seed=3), synthetic_load("code:burst_factor=8", 500, seed=3)
    assert first == again
    other = synthetic_load("code:burst_factor=8", 500, seed=4)
    assert [r.arrival_s for r in other] != [r.arrival_s for r in first]
    assert synthetic_load("code:burst_factor=8,seed=4", 500, seed=3) == other  # a seed in the spec wins


@pytest.mark.parametrize("spec, message", [
    ("chat", "unknown synthetic load 'chat'"),
    ("code:burst_factor", "'burst_factor' is not key=number"),
    ("code:burst=3", "unexpected keyword argument 'burst'"),
])
def test_bad_synthetic_spec_is_a_clear_error(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        synthetic_load(spec, 10)


def test_any_trace_file_loads_by_format_rescaled(tmp_path) -> None:
    trace = tmp_path / "mine.jsonl"
    trace.write_text("".join(f'{{"timestamp": {250 * i}, "input_length": 900, "output_length": 30, "hash_ids": [7, {i}]}}\n'
                             for i in range(21)))
    requests = load_trace(str(trace), rate=20.0)
    assert len(requests) == 21 and requests[-1].arrival_s == pytest.approx(1.0)
    assert requests[0].prefix_hashes[:32] == requests[1].prefix_hashes[:32]  # the shared leading block
    assert load_trace("azure", limit=30) == load_azure(limit=30)
    assert load_trace(str(from_env(TraceSettings).path("azure")), limit=30) == load_azure(limit=30)
    code = load_trace("code:burst_factor=4", rate=100.0, limit=200)
    assert len(code) == 200 and (len(code) - 1) / code[-1].arrival_s == pytest.approx(100.0)


@pytest.mark.parametrize("source, fmt, message", [
    ("trace.txt", None, "cannot tell the format of trace 'trace.txt'"),
    ("trace.jsonl", "parquet", "unknown trace format 'parquet'"),
    ("code", None, "needs a request count"),
    ("missing.csv", None, "cannot read Azure trace missing.csv"),
    ("empty.csv", None, "has no requests"),
    ("bad.csv", None, "bad.csv:3: bad Azure row"),
])
def test_trace_format_errors_name_the_trace(tmp_path, monkeypatch, source: str, fmt, message: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    (tmp_path / "bad.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                      "2023-11-16 18:15:46.6805900,100,20\n2023-11-16 18:15:47.1,many,20\n")
    with pytest.raises(TraceError, match=message):
        load_trace(source, fmt)


def test_trace_format_is_inferred() -> None:
    assert [trace_format(s) for s in ("a/b.CSV", "x.jsonl", "mooncake", "code:burst_factor=2")] == [
        "azure", "mooncake", "mooncake", "synthetic"]
