"""The declared series: each carries a field of ServerMetrics and feeds a field of ServerState, and what the
simulator exposes the router reads back, field for field."""

from __future__ import annotations

import dataclasses

import pytest

from headroom.contract.server_metrics import KINDS, METRIC_FIELDS, SCRAPED_STATE, SERIES, ServerMetrics
from headroom.contract.server_state import SERVER_FIELDS
from headroom.router.state.server_metrics import parse_metrics
from headroom.sim.engine import ServerEngine
from headroom.sim.exposition import metrics_registry, render
from headroom.sim.profile import H100
from headroom.sim.records import MetricsSnapshot


@pytest.mark.parametrize("series", SERIES, ids=lambda s: s.name)
def test_series_is_declared_whole(series):
    assert series.field in METRIC_FIELDS or not series.read
    assert series.feeds is None or (series.feeds in SERVER_FIELDS and series.feeds in METRIC_FIELDS)
    assert series.server in (*KINDS, "any") and series.type in ("gauge", "counter") and series.doc
    assert series.name.endswith("_total") == (series.type == "counter")


def test_every_field_is_carried():
    assert set(METRIC_FIELDS) == {s.field for s in SERIES}
    assert {"kv_cache_usage", "num_waiting", "num_running"} <= set(SCRAPED_STATE) <= set(SERVER_FIELDS)


def test_the_simulator_fills_every_field():
    snapshot = ServerEngine(H100, "s0").snapshot(0.0)
    assert [name for name in METRIC_FIELDS if getattr(snapshot.metrics, name) is None] == []


def test_the_simulators_exposition_reads_back():
    metrics = ServerMetrics(num_waiting=3, num_running=5, kv_cache_usage=0.25, prefix_cache_queries=2200,
                            prefix_cache_hits=1024, prefill_backlog=4, slots_used=5 / 256,
                            memory_used_bytes=72 * 2**30)
    snapshot = MetricsSnapshot(server_id="s0", server_type="h100", pool_key="h100", time_s=1.0, metrics=metrics)
    text = render(metrics_registry(lambda: snapshot, "llama")).decode()
    read = parse_metrics(text)
    unread = {s.field for s in SERIES if not s.read}
    assert dataclasses.asdict(read) == {name: None if name in unread else getattr(metrics, name)
                                        for name in METRIC_FIELDS}
    assert isinstance(read, ServerMetrics) and isinstance(read.num_waiting, int)
    for series in SERIES:  # what the simulator exposes is what the router would read, under every name read
        assert (series.name in text) == series.exposed, series.name
