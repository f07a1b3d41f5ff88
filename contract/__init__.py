"""The contract every headroom component shares, importable without Faust or Kafka.

- :mod:`contract.settings` — typed settings read once from the environment.
- :mod:`contract.topics` — the Kafka topics, declared once; :mod:`contract.kafka_security` — how every
  Kafka client authenticates.
- :mod:`contract.server_state` — what the router saw of a server at dispatch: the raw server state, once.
- :mod:`contract.telemetry` — the completed-request record, its wire format, its validator and its Kafka key.
- :mod:`contract.partitions` — the telemetry partition a pool's records land on (its owner's).
- :mod:`contract.strata` — the stratum of a record (waiting queue × KV utilization × prefix match).
- :mod:`contract.features` — the ordered feature names and the one record → features function.
- :mod:`contract.targets` — the latency targets: which record field observes each, which records train it.
- :mod:`contract.model_update` — the model-update message published to ``model-updates``;
  :mod:`contract.signing` — its Ed25519 signatures and the keys readers trust.
- :mod:`contract.scaling_signals` — the signals a pool scales on, as the Prometheus series that carry them.
- :mod:`contract.tls` — TLS of headroom's listeners and of the clients that call them.
"""
