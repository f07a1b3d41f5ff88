"""``headroom backtest`` — replay telemetry history from Kafka and score models and routing policies on it.

- :mod:`backtest.replay` — a topic range into a polars DataFrame, fast, without consumer-group commits.
"""
