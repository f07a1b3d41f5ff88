"""``headroom backtest`` — replay telemetry history from Kafka and score models and routing policies on it.

- :mod:`backtest.replay` — a topic range into a polars DataFrame, fast, without consumer-group commits.
- :mod:`backtest.prequential` — the live pipeline's code run over each pool's records on event time; every
  promoted version scored on the records that came after it.
- :mod:`backtest.round_pool` — its training rounds fitted in worker processes, with the serial results.
- :mod:`backtest.group` — a backtest split by partition across workers of one consumer group, and its parts
  merged.
- :mod:`backtest.published` — the versions on ``model-updates`` joined with the records that used them.
- :mod:`backtest.policies` — the recorded arrivals through the offline simulator under several policies.
- :mod:`backtest.router_policy` — the router's engine as a pick function of the simulator.
- :mod:`backtest.plots`, :mod:`backtest.report` — PNG plots, parquet tables and the Markdown report.
- :mod:`backtest.settings`, :mod:`backtest.run`, :mod:`backtest.result`, :mod:`backtest.cli` — settings, the stages
  in order, what they found, the command.
"""
