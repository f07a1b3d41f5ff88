"""The router exports autoscaling signals from its pool on /metrics, including the predicted-TTFT one."""

import asyncio

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.errors import PredictionUnavailable
from headroom.router.server import RouterServer
from headroom.sim.live import LiveServer
from headroom.sim.profile import profile
from tests.router.routercases import TablePredictor, router_config, wait_for


def signals(text: str) -> dict[tuple[str, str], float]:
    return {(s.labels["signal"], s.labels.get("server", s.labels.get("stat", ""))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name in ("headroom_autoscale_signal", "headroom_autoscale_pool_signal")}


def scrape_router(predictor, **settings) -> dict[tuple[str, str], float]:
    async def scenario():
        server = LiveServer(profile("h100"), "sim-0", time_scale=10.0)
        await server.start()
        router = RouterServer(router_config([f"127.0.0.1:{server.port}"], autoscaleRefreshS=0.05, **settings),
                              from_env(KafkaSettings, {}), predictor=predictor)
        try:
            await router.start()
            assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
            await asyncio.sleep(0.3)
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{router.http_port}/metrics") as response:
                    return signals(await response.text())
        finally:
            await router.stop()
            await server.stop()
    return asyncio.run(asyncio.wait_for(scenario(), 30))


def test_server_and_pool_signals_with_the_learned_ttft():
    found = scrape_router(TablePredictor(base=120.0), autoscaleTTFTSLOMs=400.0)
    assert found[("vllm:num_requests_waiting", "s0")] == 0.0
    assert found[("jetstream_slots_used_percentage", "s0")] == 0.0
    assert ("vllm:kv_cache_usage_perc", "mean") in found
    assert found[("headroom_predicted_ttft_headroom_ms", "s0")] == 280.0
    assert found[("headroom_predicted_ttft_slo_ratio", "mean")] == 0.3


class Unavailable:
    def predict(self, pool_key, features):
        raise PredictionUnavailable("no-model")


def test_no_model_means_no_predicted_signal_rather_than_a_guess():
    found = scrape_router(Unavailable(), autoscaleTTFTSLOMs=400.0)
    assert ("vllm:num_requests_waiting", "s0") in found
    assert not [key for key in found if key[0].startswith("headroom_predicted_ttft")]
