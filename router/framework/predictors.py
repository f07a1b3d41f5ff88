"""Adapters from the predictor package to the router's one-method :class:`~router.framework.roles.LatencyPredictor`.

:class:`EmbeddedPredictor` calls an in-process :class:`predictor.runtime.ModelRuntime`;
:class:`RemotePredictor` calls prediction servers over gRPC. Its errors become
:class:`~router.errors.PredictionUnavailable` with the fallback reason the router counts: ``warm-up``
(no model trained yet), ``no-model-for-pool``, ``invalid-batch``, ``predictor-unavailable``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from headroom.contract.targets import TARGETS
from headroom.predictor.errors import InvalidBatch, NotReady, UnknownPool
from headroom.router.errors import PredictionUnavailable
from headroom.router.framework.roles import PredictionBatch

if TYPE_CHECKING:  # the runtime (and XGBoost, which reads its models) loads only with its models
    from headroom.predictor.client import PredictorClient
    from headroom.predictor.runtime import ModelRuntime


class EmbeddedPredictor:
    """Predictions from a model runtime in this process, using models of one objective (``mean``)."""

    def __init__(self, runtime: ModelRuntime, objective: str = "mean"):
        self.runtime = runtime
        self.objective = objective

    def predict(self, pool_key: str, features: np.ndarray) -> PredictionBatch:
        try:
            prediction = self.runtime.predict(pool_key, features)
        except NotReady as err:
            raise PredictionUnavailable("warm-up", str(err)) from err
        except UnknownPool as err:
            raise PredictionUnavailable("no-model-for-pool", str(err)) from err
        except InvalidBatch as err:
            raise PredictionUnavailable("invalid-batch", str(err)) from err
        values = {t: column for t in TARGETS if (column := prediction.get(t, self.objective)) is not None}
        ok = np.ones(features.shape[0], dtype=bool)  # the producer drops non-finite or negative values per row
        versions = {m.target: m.version for m in prediction.models if m.objective == self.objective}
        return PredictionBatch(values=values, ok=ok, versions=versions)


class RemotePredictor:
    """Predictions from prediction servers through :class:`predictor.client.PredictorClient`.

    The client never raises for a failed call; rows come back not ok. When no row of a call could be
    answered, this raises ``predictor-unavailable`` (so the fallback is counted under that reason);
    otherwise the failed rows alone fall back.
    """

    def __init__(self, client: PredictorClient, objective: str = "mean"):
        self.client = client
        self.objective = objective

    def predict(self, pool_key: str, features: np.ndarray) -> PredictionBatch:
        answer = self.client.predict(pool_key, features)
        if not answer.ok.any():
            detail = next((e for e in answer.errors if e), "no prediction")
            reason = ("no-model-for-pool" if "no model for pool" in detail else
                      "warm-up" if "no model version" in detail else "predictor-unavailable")
            raise PredictionUnavailable(reason, detail)
        values = {t: column for t in TARGETS if (column := answer.get(t, self.objective)) is not None}
        versions = {t: v for (t, objective), v in answer.versions.items() if objective == self.objective}
        return PredictionBatch(values=values, ok=np.asarray(answer.ok, dtype=bool), versions=versions)
