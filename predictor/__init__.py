"""Prediction servers: the model runtime (also embedded by the router), the model-update tailer, the gRPC
PredictionService and its coalescing client, and llm-d's prediction API over HTTP (:mod:`predictor.llmd_api`,
with the JSON bodies of llm-d's latency predictor APIs in :mod:`predictor.llmd_schema`)."""
