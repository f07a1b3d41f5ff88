"""Requests held at the router: the queue's order and deadlines, and the proxy holding a burst over live servers."""

import asyncio

import aiohttp

from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.app.server import RouterServer
from headroom.router.control.held import HeldRequests
from headroom.router.framework.pipeline import DEFAULT_PIPELINE
from headroom.sim.live import LiveServer
from headroom.sim.profile import profile
from tests.router.routercases import TablePredictor, router_config, wait_for


def test_held_requests_take_their_turns_in_the_order_they_were_first_held():
    async def scenario():
        held, order = HeldRequests(), []
        tickets = {name: held.ticket() for name in ("first", "a", "b", "c")}

        async def request(name):
            await held.wait(tickets[name], 5.0)
            order.append(name)

        tasks = [asyncio.create_task(request(name)) for name in ("a", "b", "c")]
        await asyncio.sleep(0.01)
        tasks.append(asyncio.create_task(request("first")))  # held first, asked again, held once more
        await asyncio.sleep(0.01)
        waiting = len(held)
        for _ in range(4):
            held.wake()
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)
        late = asyncio.get_running_loop().time()
        await held.wait(held.ticket(), 0.05)  # nobody wakes it: its own deadline ends the wait
        waited = asyncio.get_running_loop().time() - late
        held.wake()  # an empty queue: nothing to do
        return order, waiting, waited, len(held)

    order, waiting, waited, left = asyncio.run(scenario())
    assert order == ["first", "a", "b", "c"] and waiting == 4 and 0.04 < waited < 1.0 and left == 0


def test_a_cancelled_wait_leaves_the_queue():
    async def scenario():
        held = HeldRequests()
        gone, kept = held.ticket(), held.ticket()
        task = asyncio.create_task(held.wait(gone, 5.0))
        other = asyncio.create_task(held.wait(kept, 5.0))
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        held.wake()  # passes over the cancelled one to the next
        await asyncio.wait_for(other, 1.0)
        return len(held)

    assert asyncio.run(scenario()) == 0


OVERLAYS = {"late-concentration-filter": {"holdCap": 3},  # and the model's TTFT as it is, neither corrected nor floored
            "predicted-latency-producer": {"latencyCorrection": False, "prefillFloor": False}}
HOLDING = {**DEFAULT_PIPELINE, "plugins": [{**p, "params": {**p.get("params", {}), **OVERLAYS.get(p["type"], {})}}
                                           for p in DEFAULT_PIPELINE["plugins"]]}


def test_the_proxy_holds_a_burst_that_is_late_everywhere_and_sends_it_oldest_first():
    # every prediction (400 ms) misses the 300-ms SLO: once both servers have prefill queued, requests wait at the
    # router until a server is idle or they have waited 3 × 300 ms
    async def scenario():
        servers = [LiveServer(profile("h100"), f"sim-{i}", time_scale=1.0, seed=i) for i in range(2)]
        for s in servers:
            await s.start()
        router = RouterServer(router_config([f"127.0.0.1:{s.port}" for s in servers], scheduling=HOLDING),
                              from_env(KafkaSettings, {}), predictor=TablePredictor(base=400.0, per_waiting=0.0))
        try:
            await router.start()
            assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
            url = f"http://127.0.0.1:{router.http_port}/v1/completions"

            async def one(i, session):
                body = {"prompt": f"request {i} " + "words " * 1500, "max_tokens": 40, "stream": True}
                async with session.post(url, json=body, headers={"x-slo-ttft-ms": "300", "x-request-id": f"r{i}"}) as r:
                    await r.read()
                    return r.status

            async with aiohttp.ClientSession() as session:
                statuses = []
                for i in range(8):  # one at a time, a few ms apart: arrivals in a known order
                    statuses.append(asyncio.create_task(one(i, session)))
                    await asyncio.sleep(0.005)
                statuses = await asyncio.gather(*statuses)
            metrics = router.metrics.registry
            held = metrics.get_sample_value("headroom_router_requests_held_total")
            holding = metrics.get_sample_value("headroom_router_requests_holding")
            ttft_sum = metrics.get_sample_value("inference_objective_request_ttft_seconds_sum")
        finally:
            await router.stop()
            for s in servers:
                await s.stop()
        return statuses, held, holding, ttft_sum, router.telemetry.records

    statuses, held, holding, ttft_sum, records = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert statuses == [200] * 8 and holding == 0
    waits = {r.request_id: r.dispatch_ts - r.arrival_ts for r in records}
    kept = sorted((r for r in records if waits[r.request_id] > 0.05), key=lambda r: r.arrival_ts)
    assert held == len(kept) >= 3  # the first two go at once, to a server with no prefill queued each
    assert all(waits[r.request_id] < 3 * 0.3 + 0.5 for r in kept)  # none past its cap (and a scrape)
    assert [r.request_id for r in kept] == [r.request_id for r in sorted(kept, key=lambda r: r.dispatch_ts)]
    # the learned TTFT is the server's, from dispatch; the client's includes its wait at the router
    assert ttft_sum >= sum(r.ttft_ms / 1000.0 + waits[r.request_id] for r in records) - 0.05
