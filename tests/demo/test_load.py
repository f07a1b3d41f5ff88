"""The demo's mix of requests, and the same mix as the offline simulator routes it."""

from headroom.demo.load import Mix, as_headed, dress
from headroom.router.control.headers import PRIORITY, SLO_TTFT
from headroom.sim.request import SimRequest


def requests(n):
    return [SimRequest(request_id=f"r{i}", arrival_s=i * 0.1, prompt_tokens=100, output_tokens=50) for i in range(n)]


def test_the_mix_is_seeded_and_only_streams_carry_slos():
    mix = Mix(slo_ttft_ms=2000.0, slo_tpot_ms=200.0, seed=3)
    dressed = dress(requests(2000), mix)
    assert dressed == dress(requests(2000), mix) and dressed != dress(requests(2000), Mix(seed=4))
    streams = [headers for request, headers in dressed if request.stream]
    assert all(not headers for request, headers in dressed if not request.stream)
    assert abs(len(streams) / 2000 - mix.stream_share) < 0.05
    assert abs(sum(SLO_TTFT[0] in h for h in streams) / len(streams) - mix.slo_share) < 0.05


def test_as_headed_carries_what_the_headers_say_and_nothing_else():
    dressed = dress(requests(500), Mix(slo_ttft_ms=2000.0, slo_tpot_ms=200.0, seed=3))
    for (request, headers), routed in zip(dressed, as_headed(dressed)):
        assert routed.stream == request.stream and routed.request_id == request.request_id
        if SLO_TTFT[0] in headers:
            assert (routed.slo_ttft_ms, routed.slo_tpot_ms) == (2000.0, 200.0)
            assert routed.priority == (-1 if PRIORITY in headers else 0)
        else:
            assert routed.slo_ttft_ms is None and routed.slo_tpot_ms is None and routed.priority == 0
    assert {r.priority for r in as_headed(dressed)} == {0, -1}
