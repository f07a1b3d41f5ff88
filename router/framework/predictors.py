"""Adapters from the predictor package to the router's one-method :class:`~router.framework.roles.LatencyPredictor`.

:class:`EmbeddedPredictor` calls an in-process :class:`predictor.runtime.ModelRuntime`;
:class:`RemotePredictor` calls prediction servers over gRPC. Its errors become
:class:`~router.errors.PredictionUnavailable` with the fallback reason the router counts: ``warm-up``
(no model trained yet), ``no-model-for-pool``, ``invalid-batch``, ``predictor-unavailable``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from headroom.contract.targets import TARGETS
from headroom.predictor.errors import InvalidBatch, NotReady, UnknownPool
from headroom.router.errors import PredictionUnavailable
from headroom.router.framework.candidate_features import candidate_features
from headroom.router.framework.roles import Candidate, LatencyPredictor, PredictionBatch, Request, ServerSnapshot

if TYPE_CHECKING:  # the runtime's compiled kernels (numba, LLVM: ~40 MiB resident) load only with its models
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


def predicted_again(predictor: LatencyPredictor, pool_key: str, target: str, version: int,
                    cases: Sequence[tuple[Request, ServerSnapshot]]) -> list[float] | None:
    """What ``version`` of the pool's model of ``target`` predicts for ``cases`` (requests on servers as they were at
    dispatch; NaN for a row it did not answer), to measure the latency corrections against it
    (:meth:`feedback.latency_corrections.LatencyCorrections.model_version`); None when the predictor cannot say, or
    answers with another version."""
    features = np.vstack([candidate_features(request, [Candidate(server)]) for request, server in cases])
    try:
        batch = predictor.predict(pool_key, features)
    except PredictionUnavailable:
        return None
    values = batch.values.get(target)
    if values is None or batch.versions.get(target) != version:
        return None
    answered: list[float] = np.where(np.asarray(batch.ok, dtype=bool), np.asarray(values, dtype=np.float64),
                                     np.nan).tolist()
    return answered
