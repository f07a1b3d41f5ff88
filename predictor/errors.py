"""The predictor's errors, in one small hierarchy::

    PredictorError
    ├── NotReady        no model has been applied yet (gRPC: UNAVAILABLE)
    ├── UnknownPool     models exist, but none for this pool key (gRPC: INVALID_ARGUMENT)
    └── InvalidBatch    the feature rows cannot be predicted (gRPC: INVALID_ARGUMENT)

A rejected model update is not an exception to the caller of ``apply``: it is an outcome with a reason,
counted and logged, while the previous version keeps serving.
"""

from __future__ import annotations

from headroom.errors import HeadroomError


class PredictorError(HeadroomError):
    """Base of the errors a prediction can raise."""


class NotReady(PredictorError):
    """No model version has been applied yet."""


class UnknownPool(PredictorError):
    """No model serves the requested pool key."""


class InvalidBatch(PredictorError):
    """The batch of feature rows is empty, mis-shaped or holds non-finite values."""
