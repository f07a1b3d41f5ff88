"""The proxy in front of the project's live simulator: real vLLM metric names, real SSE streams."""

import asyncio

import aiohttp

from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.app.server import RouterServer
from headroom.sim.live import LiveServer
from headroom.sim.profile import profile
from tests.router.routercases import TablePredictor, router_config, wait_for


def test_proxy_over_live_simulated_servers():
    async def scenario():
        servers = [LiveServer(profile("h100"), f"sim-{i}", time_scale=10.0, seed=i) for i in range(2)]
        for s in servers:
            await s.start()
        router = RouterServer(router_config([f"127.0.0.1:{s.port}" for s in servers]), from_env(KafkaSettings, {}),
                              predictor=TablePredictor(base=30.0, tpot=8.0))
        try:
            await router.start()
            assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
            url = f"http://127.0.0.1:{router.http_port}"
            statuses = []
            async with aiohttp.ClientSession() as http:
                for i, (path, body, headers) in enumerate([
                    ("/v1/completions", {"prompt": "a shared system prompt " * 20 + "q1", "max_tokens": 8,
                                         "stream": True}, {"x-slo-ttft-ms": "2000", "x-slo-tpot-ms": "200"}),
                    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 5},
                     {"x-prediction-based-scheduling-off": "true"}),
                ]):
                    async with http.post(url + path, json=body, headers={**headers, "x-request-id": f"live-{i}"}) as r:
                        await r.read()
                        statuses.append(r.status)
        finally:
            await router.stop()
            for s in servers:
                await s.stop()
        return statuses, router
    statuses, router = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert statuses == [200, 200]
    records = {r.request_id: r for r in router.telemetry.records}
    streamed, plain = records["live-0"], records["live-1"]
    assert streamed.stream and streamed.output_tokens == 8 and streamed.tpot_ms > 0 and streamed.ttft_ms > 0
    assert streamed.predicted_ttft_ms == 30.0 and streamed.slo_ttft_ms == 2000.0
    assert not plain.stream and plain.output_tokens == 5 and plain.predicted_ttft_ms is None
    assert streamed.prompt_tokens == 116  # the server's count: 462 bytes at 4 bytes per token, as the router estimates
