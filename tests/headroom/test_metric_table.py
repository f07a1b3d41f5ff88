"""A metric table builds each declared metric once per instance, in the instance's registry, and lists what
it declares."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from headroom.metric_table import Family, Instrument, MetricTable, counter, gauge, histogram, read_gauge


class Queue(MetricTable):
    served = counter("queue_served", "Requests served, by lane.", "lane")
    depth = gauge("queue_depth", "Requests waiting.")
    wait = histogram("queue_wait_seconds", "Time waited.", buckets=(0.1, 1.0))
    age = read_gauge("queue_oldest_age_seconds", "Age of the oldest request.", "lane")


class Lanes(Queue):
    lanes = gauge("queue_lanes", "Lanes open.")


def test_each_instance_builds_every_instrument_in_a_registry_of_its_own():
    one, two = Queue(), Queue()
    assert (type(one.served), type(one.depth), type(one.wait)) == (Counter, Gauge, Histogram)
    one.served.labels("fast").inc(3)
    assert one.registry.get_sample_value("queue_served_total", {"lane": "fast"}) == 3
    assert two.registry.get_sample_value("queue_served_total", {"lane": "fast"}) is None


def test_a_table_built_in_a_given_registry_exposes_there():
    registry = CollectorRegistry()
    Queue(registry).wait.observe(0.5)
    assert registry.get_sample_value("queue_wait_seconds_bucket", {"le": "1.0"}) == 1


def test_declared_lists_instruments_and_families_in_order_subclasses_last():
    declared = Lanes.declared()
    assert list(declared) == ["served", "depth", "wait", "age", "lanes"]
    assert [type(m) for m in declared.values()] == [Instrument, Instrument, Instrument, Family, Instrument]
    assert (declared["served"].type, declared["served"].labels) == ("counter", ("lane",))


def test_a_family_is_made_empty_for_each_scrape_and_stays_a_declaration_on_the_instance():
    queue = Queue()
    assert queue.age is Queue.age
    first = queue.age.make()
    first.add_metric(["fast"], 2.0)
    assert (first.name, first.type, len(first.samples), len(queue.age.make().samples)) == \
        ("queue_oldest_age_seconds", "gauge", 1, 0)


def test_an_instrument_is_a_plain_instance_attribute_its_declaration_kept_by_the_table():
    queue = Queue()
    assert "served" in vars(queue) and "served" not in vars(Queue)
    assert Queue.declared()["served"] == counter("queue_served", "Requests served, by lane.", "lane")
    unbuilt = Queue.__new__(Queue)
    with pytest.raises(AttributeError):
        unbuilt.served  # noqa: B018 - the read is the test
