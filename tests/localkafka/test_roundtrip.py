"""Telemetry through the real broker: everything produced arrives exactly once and decodes to the same value."""

import dataclasses

import pytest

from headroom.localkafka.selftest import round_trip, synthetic_records

pytestmark = pytest.mark.kafka
COUNT = 20_000


def test_twenty_thousand_records_arrive_exactly_once(kafka, fresh_topic):
    settings = dataclasses.replace(kafka, telemetry_topic=fresh_topic("roundtrip", partitions=4))
    sent = synthetic_records(COUNT, servers=16, seed=3)

    summary = round_trip(settings, sent)

    assert (summary.produced, summary.consumed, summary.duplicates) == (COUNT, COUNT, 0)
    assert summary.received == {r.request_id: r for r in sent}
    assert sum(count for count, _, _ in summary.by_server.values()) == COUNT
