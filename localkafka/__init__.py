"""A real Apache Kafka broker (KRaft, single node) on loopback, started by headroom itself.

- :mod:`localkafka.jars` — fetches the broker's jars from Maven Central once, into a cache.
- :mod:`localkafka.broker` — ``up`` / ``down`` / ``status`` of the broker process.
- :mod:`localkafka.admin` — creating and describing the topics declared in :mod:`contract.topics`.
- :mod:`localkafka.security` — secure mode: the broker's CA, certificates, users and their credentials.
- :mod:`localkafka.acls` — each component's grants (:mod:`localkafka.strimzi`) as the secure broker's ACLs.
"""
