"""Trace loaders, synthetic generators and regime changes."""

from __future__ import annotations

import pytest

from headroom.sim.prefixes import SharedPrefixes
from headroom.sim.synthetic import Lengths, bursty_arrivals, generate, poisson_arrivals, scale_rate, shift_prompts
from headroom.sim.traces import TraceError, load_azure, load_mooncake


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
