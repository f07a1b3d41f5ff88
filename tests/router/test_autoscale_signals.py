"""The router exports autoscaling signals on /metrics: headroom's own per model-server pod, and pool aggregates."""

import asyncio
from dataclasses import replace

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.app.server import RouterServer
from headroom.router.errors import PredictionUnavailable
from headroom.sim.live import LiveServer
from headroom.sim.profile import profile
from tests.router.routercases import TablePredictor, router_config, wait_for


def samples(text: str) -> dict[tuple[str, str], tuple[dict[str, str], float]]:
    """(series name, server or pool key) → (labels, value) of the autoscaling series."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("headroom_predicted_ttft") or s.name == "headroom_accelerator_memory_used_ratio":
                out[(s.name, s.labels["server"])] = (s.labels, s.value)
            elif s.name == "headroom_autoscale_pool_signal":
                out[(s.labels["signal"], s.labels["stat"])] = (s.labels, s.value)
    return out


def scrape_router(predictor, pod: tuple[str, str] | None = None, **settings):
    async def scenario():
        server = LiveServer(profile("h100"), "sim-0", time_scale=10.0)
        await server.start()
        config = router_config([f"127.0.0.1:{server.port}"], autoscaleRefreshS=0.05, **settings)
        if pod is not None:
            config = replace(config, servers=(replace(config.servers[0], namespace=pod[0], pod=pod[1]),))
        router = RouterServer(config, from_env(KafkaSettings, {}), predictor=predictor)
        try:
            await router.start()
            assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
            await asyncio.sleep(0.3)
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{router.http_port}/metrics") as response:
                    return samples(await response.text())
        finally:
            await router.stop()
            await server.stop()
    return asyncio.run(asyncio.wait_for(scenario(), 30))


def test_learned_ttft_signal_per_model_server_pod():
    found = scrape_router(TablePredictor(base=120.0), pod=("llm", "vllm-7d9f-abcde"), autoscaleTTFTSLOMs=400.0)
    labels, ratio = found[("headroom_predicted_ttft_slo_ratio", "s0")]
    assert (labels["namespace"], labels["pod"], ratio) == ("llm", "vllm-7d9f-abcde", 0.3)
    assert found[("headroom_predicted_ttft_headroom_ms", "s0")][1] == 280.0
    assert found[("headroom_predicted_ttft_slo_ratio", "mean")][1] == 0.3
    assert found[("vllm:num_requests_waiting", "total")][1] == 0.0


def test_without_pod_identity_a_series_names_the_server_only():
    found = scrape_router(TablePredictor(base=120.0), autoscaleTTFTSLOMs=400.0)
    labels, _ = found[("headroom_predicted_ttft_slo_ratio", "s0")]
    assert labels.get("pod", "") == labels.get("namespace", "") == ""  # Prometheus drops empty labels


class Unavailable:
    def predict(self, pool_key, features):
        raise PredictionUnavailable("no-model")


def test_no_model_means_no_predicted_signal_rather_than_a_guess():
    found = scrape_router(Unavailable(), autoscaleTTFTSLOMs=400.0)
    assert ("vllm:num_requests_waiting", "mean") in found
    assert not [key for key in found if key[0].startswith("headroom_predicted_ttft")]
