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


def test_a_stream_cut_by_the_clients_time_limit_is_judged_on_what_it_streamed(monkeypatch):
    import asyncio

    from headroom.demo import load
    from tests.router.upstream import Upstream, upstreams

    monkeypatch.setattr(load, "TIME_LIMIT_S", 0.6)
    slos = {"on-pace": "100", "behind": "20"}  # TPOT SLO ms; the server streams a token every 50 ms

    async def scenario():
        async with upstreams(Upstream("a", token_delay_s=0.05)) as (server,):
            arm = load.Arm("a", f"http://{server.address}")
            dressed = [(SimRequest(name, 0.0, 100, 200), {SLO_TTFT[0]: "1000", "x-slo-tpot-ms": tpot})
                       for name, tpot in slos.items()]
            return await load.drive([arm], dressed, max_seconds=1.0, on_outcome=lambda o: None)

    outcomes = {o.request_id: o for o in asyncio.run(scenario())}
    for outcome in outcomes.values():
        assert outcome.status == 200 and outcome.error.startswith("cut at the client's 0.6-s limit"), outcome
        assert 5 <= outcome.output_tokens < 200 and 40 < outcome.tpot_ms < 100
    assert outcomes["on-pace"].slo_met is True and outcomes["behind"].slo_met is False
