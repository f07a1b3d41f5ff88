from headroom.router.control.metrics import RouterMetrics
from headroom.router.control.telemetry_sink import TelemetryCounts


def test_telemetry_delivery_outcomes_are_read_at_scrape_time():
    metrics, counts = RouterMetrics(), TelemetryCounts()
    metrics.report_telemetry(counts)
    counts.delivered, counts.failed, counts.dropped = 7, 1, 3
    text = metrics.exposition().decode()
    assert 'headroom_router_telemetry_delivery_total{outcome="delivered"} 7.0' in text
    assert 'headroom_router_telemetry_delivery_total{outcome="failed"} 1.0' in text
    assert 'headroom_router_telemetry_delivery_total{outcome="dropped"} 3.0' in text
