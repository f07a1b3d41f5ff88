"""The contract every headroom component shares, importable without Faust or Kafka.

- :mod:`contract.settings` — typed settings read once from the environment.
- :mod:`contract.topics` — the Kafka topics, declared once.
- :mod:`contract.telemetry` — the completed-request record, its wire format and its validator.
- :mod:`contract.features` — the ordered feature names and the one record → features function.
- :mod:`contract.targets` — the latency targets: which record field observes each, which records train it.
- :mod:`contract.model_update` — the model-update message published to ``model-updates``.
"""
