"""Stratified telemetry sampling at the router: rare strata whole, busy ones thinned, every request counted."""

import asyncio
import random

import grpc
import pytest

from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.app.server import RouterServer
from headroom.router.control.telemetry_sampler import TelemetrySampler
from headroom.router.proto import router_pb2, router_pb2_grpc
from tests.router.routercases import OPEN_TELEMETRY, router_config

BUSY, RARE = "q0/kv10/pm0", "q11+/kv95/pm3"


def sampled(sampler, stratum, rate, seconds, start=0.0):
    """(records offered, weights of those sent) for ``rate`` records/s of ``stratum`` over ``seconds``."""
    n = int(rate * seconds)
    weights = [w for i in range(n) if (w := sampler.weight(stratum, start + i / rate)) is not None]
    return n, weights


def test_a_busy_stratum_is_thinned_to_its_quota_and_its_weights_count_every_request():
    sampler = TelemetrySampler(quota_per_s=20.0, rng=random.Random(7))
    sampled(sampler, BUSY, 1000, 30)  # the rate estimate settles
    offered, weights = sampled(sampler, BUSY, 1000, 60, start=30)
    assert len(weights) / 60 == pytest.approx(20, rel=0.15)
    assert sum(weights) == pytest.approx(offered, rel=0.1)
    assert max(weights) <= 1 / sampler.floor


def test_a_rare_stratum_is_sent_whole_beside_a_busy_one():
    sampler = TelemetrySampler(quota_per_s=20.0, rng=random.Random(7))
    sampled(sampler, BUSY, 1000, 30)
    offered, weights = sampled(sampler, RARE, 2, 60, start=30)
    assert weights == [1.0] * offered


def test_the_floor_bounds_the_weight_of_a_flood():
    sampler = TelemetrySampler(quota_per_s=1.0, floor=0.05, rng=random.Random(3))
    offered, weights = sampled(sampler, BUSY, 5000, 20)
    assert set(weights[-100:]) == {20.0} and len(weights) > offered * 0.04


@pytest.mark.parametrize("options", [{"quota_per_s": 0}, {"quota_per_s": 5, "floor": 0}, {"quota_per_s": 5, "floor": 1.5}])
def test_settings_out_of_range_are_refused(options):
    with pytest.raises(ValueError, match="telemetry sampling needs"):
        TelemetrySampler(**options)


def test_the_router_sends_a_sample_of_a_busy_stratum_with_weights():
    config = router_config([], environ=OPEN_TELEMETRY, telemetryStratumQuota=2.0, telemetrySampleFloor=0.05)
    router = RouterServer(config, from_env(KafkaSettings, {}))

    async def traffic():
        await router.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{router.pick_port}") as channel:
                stub = router_pb2_grpc.RouterStub(channel)
                sent = []
                for i in range(300):  # one stratum (idle server), far faster than 2 records/s
                    await stub.Pick(router_pb2.PickRequest(request_id=f"r{i}", prompt_tokens=100, max_tokens=5,
                                                           candidates=[router_pb2.ServerState(
                                                               server_id="c0", address="10.0.0.1:8000")]))
                    report = await stub.Report(router_pb2.ReportRequest(request_id=f"r{i}", e2e_ms=50,
                                                                        output_tokens=5, prompt_tokens=100))
                    sent.append(report.telemetry_sent)
                return sent
        finally:
            await router.stop()

    sent = asyncio.run(asyncio.wait_for(traffic(), timeout=60))
    records = router.telemetry.records
    assert len(records) == sum(sent) and 15 <= len(records) < 150
    assert records[0].sample_weight == 1.0 and max(r.sample_weight for r in records) > 1.0
    assert sum(r.sample_weight for r in records) == pytest.approx(300, rel=0.35)
    assert router.metrics.telemetry.labels("sampled_out")._value.get() == 300 - len(records)
