"""Prometheus metrics declared as a table: each metric's name, type, help and labels once, the objects derived.

A component's metrics are the class attributes of a :class:`MetricTable`, as ``contract.server_state.ServerState``
declares its fields: an :class:`Instrument` (:func:`counter`, :func:`gauge`, :func:`histogram`) for a metric
updated as things happen, a :class:`Family` (:func:`read_counter`, :func:`read_gauge`) for one a collector reads
at scrape time. An instance of the table holds every instrument, built in its registry, under the attribute's
name (a plain instance attribute: reading it costs what reading any attribute does); a collector makes its
families with :meth:`Family.make` (a family stays a class attribute). :meth:`MetricTable.declared` lists the
declarations, which is what tests check an exposition against.

>>> class Jobs(MetricTable):
...     done = counter("jobs_done", "Jobs finished, by queue.", "queue")
...     waiting = read_gauge("jobs_waiting", "Jobs waiting.")
>>> jobs = Jobs()
>>> jobs.done.labels("fast").inc()
>>> b'jobs_done_total{queue="fast"} 1.0' in jobs.exposition()
True
>>> [(m.name, m.type, m.labels) for m in Jobs.declared().values()]
[('jobs_done', 'counter', ('queue',)), ('jobs_waiting', 'gauge', ())]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar, overload

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"
T = TypeVar("T", Counter, Gauge, Histogram)
_KINDS: dict[str, Any] = {COUNTER: Counter, GAUGE: Gauge, HISTOGRAM: Histogram}


@dataclass(frozen=True, slots=True)
class Family:
    """A metric a collector reads at scrape time: its ``name`` (a counter's without ``_total``), ``type``,
    help (``doc``) and ``labels``."""

    name: str
    type: str
    doc: str
    labels: tuple[str, ...] = ()

    def make(self) -> CounterMetricFamily | GaugeMetricFamily:
        """An empty family of this metric, for one scrape."""
        kind = CounterMetricFamily if self.type == COUNTER else GaugeMetricFamily
        return kind(self.name, self.doc, labels=list(self.labels))


@dataclass(frozen=True, slots=True)
class Instrument(Family, Generic[T]):
    """A metric updated as things happen: a :class:`Family`'s declaration, and a histogram's ``buckets``."""

    buckets: tuple[float, ...] = ()

    def build(self, registry: CollectorRegistry) -> T:
        """The prometheus_client object of this metric, registered in ``registry``."""
        extra = {"buckets": self.buckets} if self.buckets else {}
        made: T = _KINDS[self.type](self.name, self.doc, list(self.labels), registry=registry, **extra)
        return made

    # For the type checker: an instrument declared on a table reads, on an instance, as what it builds. At run
    # time the table moves it off the class (MetricTable.__init_subclass__), so this is never called.
    @overload
    def __get__(self, instance: None, owner: type) -> Instrument[T]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> T: ...

    def __get__(self, instance: object, owner: type) -> Instrument[T] | T:
        raise AttributeError(f"{self.name}: declared on {owner.__name__}, read through {owner.__name__}.declared()")


def counter(name: str, doc: str, *labels: str) -> Instrument[Counter]:
    return Instrument(name, COUNTER, doc, labels)


def gauge(name: str, doc: str, *labels: str) -> Instrument[Gauge]:
    return Instrument(name, GAUGE, doc, labels)


def histogram(name: str, doc: str, *labels: str, buckets: tuple[float, ...]) -> Instrument[Histogram]:
    return Instrument(name, HISTOGRAM, doc, labels, buckets)


def read_counter(name: str, doc: str, *labels: str) -> Family:
    return Family(name, COUNTER, doc, labels)


def read_gauge(name: str, doc: str, *labels: str) -> Family:
    return Family(name, GAUGE, doc, labels)


class MetricTable:
    """A component's metrics: declared as class attributes, built per instance in ``registry`` (a new one by
    default, so instances never share state).

    When a table class is made its instruments leave the class for :meth:`declared`, so an instance's
    metrics are plain instance attributes, read as fast as any (a descriptor left on the class makes
    every read look past it: three times slower on CPython 3.11)."""

    _declared: ClassVar[dict[str, Family]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = dict(cls._declared)  # the parent table's first
        for attribute, value in list(vars(cls).items()):
            if isinstance(value, Family):
                declared[attribute] = value
                if isinstance(value, Instrument):
                    delattr(cls, attribute)
        cls._declared = declared

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = CollectorRegistry() if registry is None else registry
        for attribute, declared in self._declared.items():
            if isinstance(declared, Instrument):
                setattr(self, attribute, declared.build(self.registry))

    @classmethod
    def declared(cls) -> dict[str, Family]:
        """Every metric the table declares, by attribute, in the order declared (a parent table's first)."""
        return dict(cls._declared)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
