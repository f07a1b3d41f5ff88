"""Predictor killed mid-load: no request fails, the heuristic takes over, predictions return with it."""

import asyncio

import aiohttp

from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.ports import free_port
from headroom.predictor.runtime import ModelRuntime
from headroom.predictor.server import PredictorServer
from headroom.predictor.settings import PredictorSettings
from headroom.router.app.server import RouterServer
from tests.keys import TRUST
from tests.predictor.models import message, train
from tests.router.routercases import router_config, wait_for
from tests.router.upstream import Upstream, upstreams

PREDICT = {"x-prediction-based-scheduling": "true"}


def predictor_server(port, runtime):
    settings = from_env(PredictorSettings, {}, host="127.0.0.1", port=port, metrics_port=-1, grace_seconds=0.0)
    return PredictorServer(settings, None, runtime=runtime).start()


def test_predictor_killed_mid_load_then_back():
    runtime = ModelRuntime(trust=TRUST)
    for target, version in (("ttft", 1), ("tpot", 1)):
        runtime.apply(message(train(target), version, pool_key="default", target=target))
    port = free_port()
    first = predictor_server(port, runtime)

    async def send(http, url, n):
        statuses = []
        for _ in range(n):
            async with http.post(url, headers=PREDICT, json={"prompt": "p", "max_tokens": 2}) as response:
                await response.read()
                statuses.append(response.status)
        return statuses

    async def scenario():
        async with upstreams(Upstream("a"), Upstream("b")) as servers:
            router = RouterServer(router_config([s.address for s in servers], predictor="remote",
                                                predictorAddresses=f"127.0.0.1:{port}", predictorTimeoutS=0.5),
                                  from_env(KafkaSettings, {}))
            await router.start()
            assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
            url = f"http://127.0.0.1:{router.http_port}/v1/completions"
            decisions = router.metrics.decisions
            async with aiohttp.ClientSession() as http:
                before = await send(http, url, 10)
                predicted_before = decisions.labels("predicted")._value.get()
                await asyncio.to_thread(first.stop, 0)
                during = await send(http, url, 10)
                heuristic_during = decisions.labels("heuristic")._value.get()
                second = await asyncio.to_thread(predictor_server, port, runtime)
                predicted_mark = decisions.labels("predicted")._value.get()

                async def recovered():
                    for _ in range(100):  # bounded: the client retries a set-aside instance after its backoff
                        await send(http, url, 1)
                        if decisions.labels("predicted")._value.get() > predicted_mark:
                            return True
                        await asyncio.sleep(0.05)
                    return False
                back = await recovered()
                second.stop(0)
            await router.stop()
            return before, predicted_before, during, heuristic_during, back, router
    before, predicted_before, during, heuristic_during, back, router = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert before == [200] * 10 and during == [200] * 10  # zero failed requests
    assert predicted_before == 10
    assert heuristic_during == 10  # every request during the outage took the heuristic
    heuristic = router.metrics.decisions.labels("heuristic")._value.get()  # the outage and the recovery's probes
    counted = [line for line in router.metrics.exposition().decode().splitlines()
               if line.startswith("headroom_router_heuristic_decisions_total")]
    assert counted == [f'headroom_router_heuristic_decisions_total{{reason="predictor-unavailable"}} {heuristic}']
    assert back
