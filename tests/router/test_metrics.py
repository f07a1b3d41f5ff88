from prometheus_client.parser import text_string_to_metric_families

from headroom.metric_table import Instrument
from headroom.predictor.runtime import ModelRuntime
from headroom.router.app.autoscale_signals import SignalExporter
from headroom.router.control.metrics import ModelUpdateCollector, RouterMetrics
from headroom.router.control.telemetry_sink import TelemetryCounts
from tests.keys import TRUST


def test_telemetry_delivery_outcomes_are_read_at_scrape_time():
    metrics, counts = RouterMetrics(), TelemetryCounts()
    metrics.report_telemetry(counts)
    counts.delivered, counts.failed, counts.dropped = 7, 1, 3
    text = metrics.exposition().decode()
    assert 'headroom_router_telemetry_delivery_total{outcome="delivered"} 7.0' in text
    assert 'headroom_router_telemetry_delivery_total{outcome="failed"} 1.0' in text
    assert 'headroom_router_telemetry_delivery_total{outcome="dropped"} 3.0' in text


def test_every_declared_metric_is_exposed_with_its_type_and_labels():
    """Every metric of the router's tables (its own and the scaling signals', in one registry, as the router
    serves them) appears on /metrics under its name, with its type and exactly its labels; nothing else does."""
    metrics = RouterMetrics()
    signals = SignalExporter(metrics.registry).metrics
    metrics.report_telemetry(TelemetryCounts())
    metrics.report_corrections(lambda: iter([("s1", "ttft", 1.0)]))
    metrics.registry.register(ModelUpdateCollector(ModelRuntime(trust=TRUST)))
    declared = {}
    for table in (metrics, signals):
        for attribute, metric in type(table).declared().items():
            declared[metric.name] = metric
            if isinstance(metric, Instrument):  # one sample each, so its labels show
                built = getattr(table, attribute)
                built = built.labels(*metric.labels) if metric.labels else built
                built.observe(1.0) if metric.type == "histogram" else built.inc(1.0)
    exposed = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
    assert len(declared) == 31  # 26 of the router's own, 5 of the scaling signals'
    for name, metric in declared.items():
        assert name in exposed, f"{name} is declared but not exposed"
        assert exposed[name].type == metric.type, name
        assert {k for s in exposed[name].samples for k in s.labels} - {"le"} == set(metric.labels), name
    created = {name + "_created" for name in declared}  # prometheus_client's creation times, read as gauges
    assert set(exposed) - created == set(declared), "a metric is exposed that no table declares"
