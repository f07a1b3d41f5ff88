"""Prediction servers: the model runtime (also embedded by the router), the model-update tailer, the gRPC
PredictionService and its coalescing client."""
