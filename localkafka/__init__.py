"""A real Apache Kafka broker (KRaft, single node) on loopback, started by headroom itself.

- :mod:`localkafka.jars` — fetches the broker's jars from Maven Central once, into a cache.
- :mod:`localkafka.broker` — ``up`` / ``down`` / ``status`` of the broker process.
- :mod:`localkafka.admin` — creating and describing the topics declared in :mod:`contract.topics`.
"""
