"""An idle server reproduces the sanity anchors of traces/README.md within 10%."""

from __future__ import annotations

import pytest

from headroom.sim.engine import ServerEngine
from headroom.sim.profile import A100, H100, ServerProfile
from headroom.sim.request import SimRequest


def _run(profile: ServerProfile, requests: list[SimRequest], until: float = 120.0) -> ServerEngine:
    engine = ServerEngine(profile, record_tokens=True)
    for r in requests:
        engine.submit(r, r.arrival_s)
    engine.advance_to(until)
    return engine


def _decode_step_ms(engine: ServerEngine, last_admitted: str) -> float:
    """The first decode gap of the last request to be prefilled: the moment the whole batch decodes."""
    times = next(o for o in engine.finished if o.request.request_id == last_admitted).token_times
    return (times[1] - times[0]) * 1000.0


def test_single_stream_decode_at_1k_context() -> None:
    engine = _run(H100, [SimRequest("r", 0.0, 1000, 49)])
    assert engine.finished[0].tpot_ms == pytest.approx(6.6, rel=0.10)


def test_fresh_2048_token_prefill() -> None:
    engine = _run(H100, [SimRequest("r", 0.0, 2048, 1)])
    assert engine.finished[0].ttft_ms == pytest.approx(50.0, rel=0.10)


def test_batch_64_at_1k_context() -> None:
    engine = _run(H100, [SimRequest(f"r{i}", 0.0, 1000, 100) for i in range(64)])
    assert _decode_step_ms(engine, "r63") == pytest.approx(11.6, rel=0.10)


def test_batch_256_at_2k_context() -> None:
    roomy = H100.with_(kv_blocks=40_000)  # the anchor needs more KV than one 8B H100 has
    engine = _run(roomy, [SimRequest(f"r{i}", 0.0, 1900, 300) for i in range(256)])
    assert len(engine.finished) == 256
    assert _decode_step_ms(engine, "r255") == pytest.approx(42.0, rel=0.10)


def test_mixed_step_is_an_inter_token_spike() -> None:
    wide = H100.with_(token_budget=2048 + 128)  # room for the anchor's 2,048 prefill tokens next to 128 decodes
    decoders = [SimRequest(f"d{i}", 0.0, 1450, 1000) for i in range(128)]
    engine = ServerEngine(wide, record_tokens=True)
    for r in decoders:
        engine.submit(r, 0.0)
    engine.advance_to(5.0)  # every decoder is past its prefill by now
    engine.submit(SimRequest("p", 5.0, 2048, 1), 5.0)
    engine.advance_to(120.0)
    times = next(o for o in engine.finished if o.request.request_id == "d0").token_times
    gaps = [b - a for a, b in zip(times, times[1:]) if a >= 5.0]
    assert max(gaps) * 1000.0 == pytest.approx(64.0, rel=0.10)
    assert min(gaps) * 1000.0 == pytest.approx(6.5 + 0.02 * 128 + 6e-5 * 128 * 1500, rel=0.10)


def test_a100_is_slower_by_the_stated_factors() -> None:
    assert A100.step_ms(2048, 0, 0, 0) / H100.step_ms(2048, 0, 0, 0) == pytest.approx(
        (6.5 * 1.6 + 0.066 * 2048) / (6.5 + 0.020 * 2048))
    assert A100.kv_blocks == H100.kv_blocks == 29_205
