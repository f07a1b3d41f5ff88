"""The Faust topology that turns telemetry into training windows, drift signals and retraining.

- :mod:`streams.settings` — the worker's typed settings.
- :mod:`streams.window_rules` — admission and eviction rules of a stratum, and window snapshots (pure).
- :mod:`streams.windows` — the windows of every (pool key, target), in memory, mirrored to a table.
- :mod:`streams.ingest` — one telemetry message → window changes, residuals or a dead letter.
- :mod:`streams.reader` — telemetry read in batches from the partitions the worker owns.
- :mod:`streams.consume` — the consuming loop: batches in; windows, dead letters and changelog writes out.
- :mod:`streams.ownership` — the partitions a worker owns, and the fenced transactions it writes them in.
- :mod:`streams.state_topic` — the windows' changelog topic, read back committed on a take-over.
- :mod:`streams.retrain` — the retraining loop: snapshots trained off the event loop, then published.
- :mod:`streams.metrics` — Prometheus metrics of the worker.
- :mod:`streams.app` — the Faust app wiring it together.
"""
