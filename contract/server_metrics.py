"""What a model server reports on ``/metrics``, declared once.

Each :class:`Series` is one Prometheus series a model server exposes: its name, type, help and label, the server
kind that exports it (vLLM, JetStream, or any), how its label sets combine (several models on one server), the
field of :class:`ServerMetrics` it carries, and the :class:`~contract.server_state.ServerState` field it feeds on
a server of its kind. From :data:`SERIES`, by name: the simulator's exposition (:mod:`sim.exposition` writes
every exposed series from the same-named fields of its snapshot's metrics) and the router's scrape
(:func:`router.state.server_metrics.parse_metrics`); the router's pool and the simulator's view copy the fed
fields (:data:`SCRAPED_STATE`) into the server state by name.

A server is of the first kind (:data:`KINDS`) whose series it exposes: a server exposing both vLLM's and
JetStream's series is read by vLLM's, its JetStream ones kept apart (for the autoscaling signals). Adding a
scraped server feature: a :class:`Series` here and the field of :class:`ServerMetrics` it carries, the field of
``ServerState`` it feeds, and its value in the simulator (``sim.engine.ServerEngine.snapshot``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

VLLM, JETSTREAM, ANY = "vllm", "jetstream", "any"
KINDS = (VLLM, JETSTREAM)  # a server exposing series of several kinds is read as the first
GAUGE, COUNTER = "gauge", "counter"
SUM, MAX = "sum", "max"  # how a series' label sets combine into one value


@dataclass(frozen=True, slots=True)
class Series:
    """One series a model server exposes: ``name`` as sampled (a counter's ends in ``_total``), its ``type``
    and ``doc``, the ``server`` kind that exports it, the :class:`ServerMetrics` ``field`` it carries, the
    ``ServerState`` field it ``feeds`` on a server of its kind, how label sets ``combine``, the ``label`` naming the model, and
    whether the simulator ``exposed`` it (False: an older name the router still reads) and the router ``read`` it
    (False: only the simulator fills the field)."""

    name: str
    type: str
    doc: str
    server: str
    field: str
    feeds: str | None = None
    combine: str = SUM
    label: str = "model_name"  # the label that tells the models one server serves apart
    exposed: bool = True
    read: bool = True


SERIES = (
    Series("vllm:num_requests_running", GAUGE, "Number of requests in model execution batches.", VLLM,
           "num_running", feeds="num_running"),
    Series("vllm:num_requests_waiting", GAUGE, "Number of requests waiting to be processed.", VLLM,
           "num_waiting", feeds="num_waiting"),
    Series("vllm:kv_cache_usage_perc", GAUGE, "KV-cache usage. 1 means 100 percent usage.", VLLM,
           "kv_cache_usage", feeds="kv_cache_usage", combine=MAX),
    Series("vllm:gpu_cache_usage_perc", GAUGE, "GPU KV-cache usage (vLLM before 0.10).", VLLM,
           "kv_cache_usage", feeds="kv_cache_usage", combine=MAX, exposed=False),
    Series("vllm:prefix_cache_queries_total", COUNTER, "Prefix cache queries, in terms of number of queried tokens.",
           VLLM, "prefix_cache_queries", read=False),  # the router keeps a prefix index of its own
    Series("vllm:prefix_cache_hits_total", COUNTER, "Prefix cache hits, in terms of number of cached tokens.",
           VLLM, "prefix_cache_hits", read=False),
    Series("jetstream_prefill_backlog_size", GAUGE, "Size of prefill queue.", JETSTREAM,
           "prefill_backlog", feeds="num_waiting"),
    Series("jetstream_slots_used_percentage", GAUGE, "The percentage of decode slots currently being used.",
           JETSTREAM, "slots_used", feeds="kv_cache_usage", combine=MAX),
    Series("accelerator_memory_used_bytes", GAUGE, "Accelerator memory in use (weights and KV cache).", ANY,
           "memory_used_bytes"),
)


@dataclass(frozen=True, slots=True)
class ServerMetrics:
    """One server's ``/metrics``: the field each series carries. The ``ServerState`` fields (usage, waiting,
    running) are 0 when the server reports none of their series; the others are None then, and always in the
    router's scrape for a series it does not read. The simulator fills every field."""

    kv_cache_usage: float
    num_waiting: int
    num_running: int
    slots_used: float | None = None  # JetStream's decode slots in use, 0-1
    prefill_backlog: int | None = None  # JetStream's prefill queue
    memory_used_bytes: int | None = None
    prefix_cache_queries: int | None = None  # vLLM's prefix-cache counters, in prompt tokens
    prefix_cache_hits: int | None = None


# each field of ServerMetrics and whether it counts (an int) rather than measures
METRIC_FIELDS: dict[str, bool] = {f.name: str(f.type).startswith("int") for f in fields(ServerMetrics)}
SCRAPED_STATE = tuple(dict.fromkeys(s.feeds for s in SERIES if s.feeds))  # the ServerState fields scraped
READ = tuple(s for s in SERIES if s.read)  # what the router scrapes
SERIES_BY_NAME = {s.name: s for s in SERIES}
SAMPLE_NAMES = tuple(s.name for s in READ)


def series_name(server: str, field: str, *, older: bool = False) -> str:
    """The name of the series a ``server`` of its kind exports ``field`` by (``older``: the older name still
    read, not exposed)."""
    for series in SERIES:
        if series.server == server and series.field == field and series.exposed != older:
            return series.name
    raise LookupError(f"no {'older ' if older else ''}series of {server} carries {field}")

