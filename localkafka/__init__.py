"""A real Apache Kafka broker (KRaft, single node) on loopback, started by headroom itself, and the Kafka
users every component needs on a real cluster.

- :mod:`localkafka.jars` — fetches the broker's jars from Maven Central once, into a cache.
- :mod:`localkafka.broker` — ``up`` / ``down`` / ``status`` of the broker process; its topics are made by
  :mod:`headroom.kafka_topics`, as on any cluster.
- :mod:`localkafka.security` — secure mode: the broker's CA, certificates, users and their credentials.
- :mod:`localkafka.acls` — each component's grants (:mod:`localkafka.strimzi`) as the secure broker's ACLs.
"""
