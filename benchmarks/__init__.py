"""Measurements of headroom, apart from the product: ``headroom bench router | predictor | sim | ...``
(:mod:`benchmarks.cli`) and the longer runs of this package, each a module run as
``python -m headroom.benchmarks.<name>``; their numbers are recorded in ``docs/benchmarks.md``. Those that
drive the tests' helpers live in :mod:`benchmarks.dev`, which runs from a checkout and is not in the wheel.

Importing this package applies the process-wide settings (:func:`headroom.process.configure`) before a
benchmark module loads XGBoost, as the ``headroom`` command does first thing.

- :mod:`benchmarks.router` — the router's decision latency with embedded prediction.
- :mod:`benchmarks.predictor`, :mod:`benchmarks.predictor_grpc` — the prediction runtime in process, the
  publish-to-serving delay, and one gRPC server under closed-loop load (``grpc_load/``: a Go load generator).
- :mod:`benchmarks.sim` — simulation speed and the baseline-policy table on the public traces.
"""

from headroom.process import configure

configure()
