"""headroom: predicted-latency routing for LLM inference pools, latency models learned online from Kafka
telemetry, and autoscaling guidance.

Each top-level folder of the source tree (``router/``, ``streams/``, ``contract/``, ...) installs as a
subpackage of this one (``headroom.router``, ``headroom.streams``, ...), so no generic module name lands
in site-packages. Beside them, what every package shares:

- :mod:`headroom.errors` — the error hierarchy, and :class:`~headroom.errors.CommandError`.
- :mod:`headroom.kafka_clients` — every Kafka client, made from :class:`~contract.topics.KafkaSettings`.
- :mod:`headroom.kafka_auth` — Kafka client security in librdkafka's and Faust's terms;
  :mod:`headroom.google_kafka` — the OAUTHBEARER token provider for Google's managed Kafka.
- :mod:`headroom.tls` — TLS of the gRPC and HTTP listeners and clients; :mod:`headroom.certificates` — a
  private CA and self-signed certificates.
- :mod:`headroom.kafka_topics` — creating and checking the declared topics on any cluster
  (:mod:`headroom.topic_drift`: how a topic differs from its declaration).
- :mod:`headroom.model_topic` — the one reader of ``model-updates``.
- :mod:`headroom.process` — process-wide settings, applied once where a process starts.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("headroom")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
