"""A drop-in for llm-d's latency predictor sidecars, backed by headroom.

- :mod:`llmd.schema` — the JSON bodies of its prediction and training APIs, checked as its servers check
  them, with FastAPI's 422 body.
- :mod:`llmd.prediction_api` — its prediction server's HTTP API over a predictor's model runtime (served by
  ``headroom predictor serve --http-port``).
- :mod:`llmd.training_api` — its training server's HTTP API: samples in, telemetry records out to Kafka
  (``headroom llmd training-server``); :mod:`llmd.intake` bounds what it takes and refuses what the worker
  would not keep; :mod:`llmd.model_routes` lists, dumps and exports the versions on ``model-updates``;
  :mod:`llmd.training_metrics` its metrics, under the reference's names too.

How samples and rows map to headroom's records and features is defined in :mod:`contract.llmd`.
"""
