"""Known traps found in HPA specs."""

from __future__ import annotations

import pytest

from headroom.autoscale.spec import (
    Behavior,
    HpaSpec,
    MetricSpec,
    MetricTarget,
    SourceType,
    TargetType,
)
from headroom.autoscale.traps import find_traps


def pods(name: str, target_milli: int) -> MetricSpec:
    return MetricSpec(SourceType.PODS, name, MetricTarget(TargetType.AVERAGE_VALUE, target_milli))


CASES = {
    "small-target": (HpaSpec(max_replicas=5, metrics=(pods("vllm:num_requests_waiting", 5000),)), "small-target"),
    "max-query": (HpaSpec(max_replicas=5, metrics=(MetricSpec(SourceType.EXTERNAL, "max_queue_size",
                                                              MetricTarget(TargetType.VALUE, 10_000)),)),
                  "max-query"),
    "memory-bytes": (HpaSpec(max_replicas=5, metrics=(MetricSpec(SourceType.RESOURCE, "memory",
                                                                 MetricTarget(TargetType.UTILIZATION, 80)),)),
                     "memory-bytes"),
    "queue-with-memory": (HpaSpec(max_replicas=5, metrics=(pods("vllm:num_requests_waiting", 20_000),
                                                           pods("vllm:kv_cache_usage_perc", 800))),
                          "queue-with-memory"),
    "broken-metric": (HpaSpec(max_replicas=5, metrics=(pods("a", 20_000), pods("b", 20_000))), "broken-metric"),
    "legacy-behavior": (HpaSpec(max_replicas=5, metrics=(pods("a", 20_000),)), "legacy-behavior"),
    "slow-load": (HpaSpec(max_replicas=5, metrics=(pods("a", 20_000),), behavior=Behavior()), "slow-load"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_trap_is_found(case) -> None:
    spec, code = case
    assert code in {t.code for t in find_traps(spec, load_delay_s=45.0)}


def test_a_sound_spec_has_no_traps() -> None:
    spec = HpaSpec(max_replicas=5, metrics=(pods("vllm:num_requests_waiting", 20_000),), behavior=Behavior())
    assert find_traps(spec, load_delay_s=10.0) == []
