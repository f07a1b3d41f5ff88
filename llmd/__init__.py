"""A drop-in for llm-d's latency predictor sidecars, backed by headroom.

Its prediction server's HTTP API is the predictor's own (:mod:`predictor.llmd_api`, served by
``headroom predictor serve --http-port``), as are the JSON bodies of both APIs (:mod:`predictor.llmd_schema`).
Here:

- :mod:`llmd.sidecar` — the prediction sidecar as the reference's image runs it.
- :mod:`llmd.training_api` — its training server's HTTP API: samples in, telemetry records out to Kafka
  (``headroom llmd training-server``); :mod:`llmd.intake` bounds what it takes and refuses what the worker
  would not keep; :mod:`llmd.model_routes` lists, dumps and exports the versions on ``model-updates``;
  :mod:`llmd.training_metrics` its metrics, under the reference's names too.

How samples and rows map to headroom's records and features is defined in :mod:`headroom.llmd_terms`.
"""
