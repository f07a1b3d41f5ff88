"""The metric pipeline delay (scrape interval + adapter lag) and the static metrics source."""

from __future__ import annotations

import pytest

from headroom.autoscale.errors import MetricUnavailable
from headroom.autoscale.metrics_source import ScrapedMetrics, StaticMetrics
from headroom.autoscale.pods import PodSample
from headroom.autoscale.spec import MetricSpec, MetricTarget, SourceType, TargetType

QUEUE = MetricSpec(SourceType.PODS, "q", MetricTarget(TargetType.AVERAGE_VALUE, 5000))


def snapshot(value: int) -> StaticMetrics:
    return StaticMetrics(pods={QUEUE.label: {"p": PodSample(value)}})


def value_at(pipeline: ScrapedMetrics, now: float) -> int:
    return pipeline.at(now).pod_samples(QUEUE, now)["p"].value


def test_scrapes_are_due_every_interval() -> None:
    pipeline = ScrapedMetrics(scrape_interval=15.0)
    assert pipeline.scrape_due(0.0)
    pipeline.record(0.0, snapshot(1))
    assert not pipeline.scrape_due(14.9) and pipeline.scrape_due(15.0)


def test_adapter_lag_delays_what_the_controller_sees() -> None:
    pipeline = ScrapedMetrics(scrape_interval=15.0, adapter_lag=20.0)
    for i, t in enumerate((0.0, 15.0, 30.0, 45.0)):
        pipeline.record(t, snapshot(i))
    assert value_at(pipeline, 20.0) == 0
    assert value_at(pipeline, 34.9) == 0
    assert value_at(pipeline, 35.0) == 1
    assert value_at(pipeline, 65.0) == 3


def test_nothing_scraped_yet_reads_as_unavailable() -> None:
    pipeline = ScrapedMetrics(scrape_interval=15.0, adapter_lag=30.0)
    pipeline.record(0.0, snapshot(1))
    with pytest.raises(MetricUnavailable):
        pipeline.at(10.0).pod_samples(QUEUE, 10.0)


def test_scrapes_must_move_forward() -> None:
    pipeline = ScrapedMetrics()
    pipeline.record(10.0, snapshot(1))
    with pytest.raises(ValueError):
        pipeline.record(10.0, snapshot(2))


def test_old_scrapes_are_dropped_but_the_visible_one_is_kept() -> None:
    pipeline = ScrapedMetrics(scrape_interval=15.0, adapter_lag=0.0)
    for i in range(100):
        pipeline.record(15.0 * i, snapshot(i))
    assert len(pipeline) <= 4
    assert value_at(pipeline, 15.0 * 99) == 99


@pytest.mark.parametrize("call", [
    lambda m: m.pod_samples(QUEUE, 0.0),
    lambda m: m.object_value(QUEUE, 0.0),
    lambda m: m.external_values(QUEUE, 0.0),
], ids=["pods", "object", "external"])
def test_static_metrics_absent_label_is_unavailable(call) -> None:
    with pytest.raises(MetricUnavailable):
        call(StaticMetrics())
