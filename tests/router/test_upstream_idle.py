"""The body of a server's answer is read within ``idle_s`` between chunks — a silent server fails the read
with TimeoutError, a slow client does not count against the server — from a real aiohttp server, over the
router's own upstream client."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from headroom.router.fronts.upstreams import IdleWatch, TotalTimeout, Upstreams, UpstreamTimeouts
from tests.conftest import free_port

IDLE_S = 0.3


async def silent_after(chunks: int, port: int) -> web.AppRunner:
    """A server that streams ``chunks`` chunks 0.05 s apart, then says nothing for 2 s (cleanup waits it out)."""
    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        for i in range(chunks):
            await response.write(f"data: {i}\n\n".encode())
            await asyncio.sleep(0.05)
        await asyncio.sleep(2)
        return response
    app = web.Application()
    app.router.add_get("/", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


def read_all(chunks: int, client_pause_s: float, total_s: float = 600.0, idle_s: float = IDLE_S,
             first_pause_only: bool = False) -> tuple[list[bytes], BaseException | None, float]:
    async def scenario():
        port = free_port()
        runner = await silent_after(chunks, port)
        upstreams = Upstreams(service=None, timeouts=UpstreamTimeouts(idle_s=idle_s))  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        got, error, started, took = [], None, loop.time(), 0.0
        try:
            response = await upstreams.pool.request(f"127.0.0.1:{port}", "GET", "/", [], b"")
            try:
                try:
                    async for chunk in upstreams.chunks(response, started + total_s):
                        got.append(chunk)
                        if len(got) == 1 or not first_pause_only:
                            await asyncio.sleep(client_pause_s)  # the client taking its time
                except TimeoutError as err:
                    error, took = err, loop.time() - started
            finally:
                response.release()
        finally:
            await runner.cleanup()
        return got, error, took
    return asyncio.run(scenario())


def test_a_server_silent_for_idle_s_fails_the_read_with_timeout_error():
    got, error, took = read_all(chunks=3, client_pause_s=0.0)
    assert b"".join(got) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert isinstance(error, TimeoutError) and f"{IDLE_S:g} s" in str(error)
    assert IDLE_S <= took < 1.5  # well before the server's 2 s of silence end


def test_a_slow_client_is_not_the_servers_silence():
    got, error, _ = read_all(chunks=2, client_pause_s=2 * IDLE_S)  # each chunk held longer than idle_s
    assert len(got) >= 2 and isinstance(error, TimeoutError)  # timed out only in the server's own silence


def test_a_total_deadline_passing_while_the_client_takes_a_chunk_ends_the_stream_at_the_next_read():
    got, error, took = read_all(chunks=40, client_pause_s=0.8, total_s=0.5, idle_s=1.0, first_pause_only=True)
    assert len(got) == 1 and isinstance(error, TotalTimeout)  # not streaming on for up to idle_s more


def test_a_cancelled_read_is_a_cancellation_not_a_timeout():
    async def scenario():
        watch = IdleWatch(idle_s=60)
        reading = asyncio.ensure_future(asyncio.sleep(10, b""))
        asyncio.get_running_loop().call_later(0.05, asyncio.current_task().cancel)
        try:
            await watch.read(reading)
        finally:
            watch.close()
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(scenario())


def _dispatch(slo_ttft_ms=None, stream=True, ttft=None, e2e=None):
    from headroom.router.control.service import Dispatch
    from headroom.router.framework.engine import Decision
    from headroom.router.framework.roles import Candidate, Prediction
    from tests.router.routercases import req, server

    request = req(slo_ttft_ms=slo_ttft_ms, stream=stream)
    prediction = None if ttft is None else Prediction(ttft_ms=ttft, tpot_ms=10.0, e2e_ms=e2e)
    chosen = Candidate(server("s0"), prediction)
    return Dispatch(request, Decision(request, "p", [chosen], [], chosen), 0.0, 0.0, 0.0)


@pytest.mark.parametrize("dispatch, limit", [
    pytest.param(_dispatch(slo_ttft_ms=500.0, ttft=100.0), 2.0, id="slo-first-within-the-floor"),
    pytest.param(_dispatch(slo_ttft_ms=5000.0, ttft=100.0), 20.0, id="slo-before-prediction"),
    pytest.param(_dispatch(ttft=1500.0), 6.0, id="predicted-ttft"),
    pytest.param(_dispatch(stream=False, ttft=100.0, e2e=9000.0), 36.0, id="predicted-e2e-when-not-streaming"),
    pytest.param(_dispatch(slo_ttft_ms=600_000.0), 120.0, id="capped"),
    pytest.param(_dispatch(), 120.0, id="nothing-known-the-max"),
])
def test_the_first_byte_limit_is_derived_from_the_slo_or_the_prediction(dispatch, limit):
    assert UpstreamTimeouts().first_byte_of(dispatch) == pytest.approx(limit)


def test_a_set_first_byte_limit_holds_for_every_request():
    assert UpstreamTimeouts(first_byte_s=7.0).first_byte_of(_dispatch(slo_ttft_ms=100.0)) == 7.0
