"""The PredictionService servicer: proto → feature rows → :meth:`ModelRuntime.predict` → proto.

Feature rows come packed (the router's path: it computed them with the contract's function) or as raw
columns, from which :func:`predictor.raw_columns.raw_rows` computes them here.

Domain errors map to gRPC status codes in :data:`STATUS_OF` and nowhere else. A call holds at most
``max_rows`` rows (:class:`~predictor.errors.InvalidBatch` naming the limit), and the server's messages are
sized for that (:func:`server_message_options`).
"""

from __future__ import annotations

import time

import grpc
import numpy as np

from headroom.contract.features import FEATURE_NAMES, FEATURE_SCHEMA, RAW_COLUMNS
from headroom.predictor.errors import InvalidBatch, NotReady, PredictorError, UnknownPool
from headroom.predictor.metrics import PredictorMetrics
from headroom.predictor.proto import prediction_pb2, prediction_pb2_grpc
from headroom.predictor.raw_columns import raw_rows
from headroom.predictor.runtime import ModelRuntime, PoolPrediction

STATUS_OF = {
    NotReady: grpc.StatusCode.UNAVAILABLE,
    UnknownPool: grpc.StatusCode.INVALID_ARGUMENT,
    InvalidBatch: grpc.StatusCode.INVALID_ARGUMENT,
}
FLOAT32_LE = np.dtype("<f4")
MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # what a client accepts
GRPC_MESSAGE_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
MAX_MODELS_PER_POOL = 8  # targets × objectives, with room


def server_message_options(max_rows: int) -> list[tuple[str, int]]:
    """The server's message limits: a request of ``max_rows`` rows (packed float32 rows or raw float64 columns)
    and its answer, with room for the framing."""
    per_row = max(4 * len(FEATURE_NAMES), 8 * len(RAW_COLUMNS), 4 * MAX_MODELS_PER_POOL)
    size = per_row * max_rows + 64 * 1024
    return [("grpc.max_receive_message_length", size), ("grpc.max_send_message_length", size)]


def request_rows(request: prediction_pb2.PredictRequest, max_rows: int | None = None) -> np.ndarray:
    """The request's feature rows as an ``(n, n_features)`` float32 matrix; :class:`InvalidBatch` if malformed or
    longer than ``max_rows``."""
    kind = request.WhichOneof("rows")
    if kind == "raw":
        columns = {name: column.values for name, column in request.raw.columns.items()}
        _check_rows(max((len(values) for values in columns.values()), default=0), max_rows)
        return raw_rows(columns)
    width = len(FEATURE_NAMES)
    if request.feature_schema and request.feature_schema != FEATURE_SCHEMA:
        raise InvalidBatch(f"feature_schema {request.feature_schema!r} differs from the server's {FEATURE_SCHEMA!r}")
    if request.n_features != width:
        raise InvalidBatch(f"n_features is {request.n_features}, the server's schema has {width} features "
                           f"({', '.join(FEATURE_NAMES)})")
    if kind == "features_f32le":
        raw = request.features_f32le
        if len(raw) % (4 * width):
            raise InvalidBatch(f"features_f32le holds {len(raw)} bytes, not a whole number of rows of "
                               f"{width} float32 values ({4 * width} bytes)")
        values = np.frombuffer(raw, dtype=FLOAT32_LE)
    elif kind == "features":
        values = np.asarray(request.features.values, dtype=np.float32)
        if values.size % width:
            raise InvalidBatch(f"features holds {values.size} values, not a whole number of rows of {width}")
    else:
        raise InvalidBatch("empty batch: the request carries no feature rows")
    _check_rows(values.size // width, max_rows)
    return values.reshape(-1, width)


def _check_rows(rows: int, max_rows: int | None) -> None:
    if max_rows is not None and rows > max_rows:
        raise InvalidBatch(f"{rows} rows, over the limit of {max_rows} per call (HEADROOM_PREDICTOR_MAX_ROWS)")


def response_of(prediction: PoolPrediction, n_rows: int) -> prediction_pb2.PredictResponse:
    return prediction_pb2.PredictResponse(pool_key=prediction.pool_key, n_rows=n_rows, predictions=[
        prediction_pb2.ModelPrediction(target=model.target, objective=model.objective,
                                       quantile=model.quantile or 0.0, version=model.version,
                                       values_f32le=prediction.values[index].astype(FLOAT32_LE, copy=False).tobytes())
        for index, model in enumerate(prediction.models)])


class PredictionServicer(prediction_pb2_grpc.PredictionServiceServicer):
    def __init__(self, runtime: ModelRuntime, metrics: PredictorMetrics, max_rows: int | None = None) -> None:
        self.runtime = runtime
        self.metrics = metrics
        self.max_rows = max_rows

    def Predict(self, request: prediction_pb2.PredictRequest,
                context: grpc.ServicerContext) -> prediction_pb2.PredictResponse:
        started = time.perf_counter()
        try:
            rows = request_rows(request, self.max_rows)
            prediction = self.runtime.predict(request.pool_key, rows)
        except PredictorError as err:
            code = STATUS_OF[type(err)]
            self.metrics.failed(code.name)
            context.abort(code, str(err))
        response = response_of(prediction, len(rows))
        self.metrics.served(len(rows), len(prediction.models), time.perf_counter() - started)
        return response
