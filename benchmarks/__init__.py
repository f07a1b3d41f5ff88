"""Measurements of headroom, apart from the product: ``headroom bench router | predictor | sim`` (:mod:`benchmarks.cli`)
and the longer scripts of this folder, whose numbers are recorded in ``docs/benchmarks.md``.

- :mod:`benchmarks.router` — the router's decision latency with embedded prediction.
- :mod:`benchmarks.predictor`, :mod:`benchmarks.predictor_grpc` — the prediction runtime in process, the
  publish-to-serving delay, and one gRPC server under closed-loop load (``grpc_load/``: a Go load generator).
- :mod:`benchmarks.sim` — simulation speed and the baseline-policy table on the public traces.
"""
