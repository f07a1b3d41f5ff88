"""The live version of each model: the latest published update per model key, with its booster loaded.

A version whose model fails :func:`contract.model_update.load_update` (another feature schema, a model
that does not load, a booster that disagrees with its message about the output transform) still counts
for version numbering (versions only grow) but not as a model to beat at the promotion gate.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

import xgboost as xgb

from headroom.contract.model_update import ModelUpdate, RejectedUpdate, load_update, model_key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveModel:
    update: ModelUpdate
    booster: xgb.Booster | None  # None when it cannot be compared (unloadable, other schema)

    @property
    def version(self) -> int:
        return self.update.version


def live_model(update: ModelUpdate, booster: xgb.Booster | None = None) -> LiveModel:
    """A :class:`LiveModel` for ``update``, loading its booster unless one is given."""
    if booster is not None:
        return LiveModel(update, booster)
    try:
        booster = load_update(update)
    except RejectedUpdate as err:
        log.warning("model %s v%d is not usable (%s: %s): it only counts for versioning", update.key,
                    update.version, err.reason, err.detail)
        return LiveModel(update, None)
    return LiveModel(update, booster)


class LiveModels:
    """Latest version per model key."""

    def __init__(self, updates: Iterable[ModelUpdate] = ()):
        self._models: dict[str, LiveModel] = {}
        for update in updates:
            self.offer(live_model(update))

    def offer(self, model: LiveModel) -> bool:
        """Keep ``model`` if it is newer than what is held for its key; True when kept."""
        held = self._models.get(model.update.key)
        if held is not None and held.version >= model.version:
            return False
        self._models[model.update.key] = model
        return True

    def get(self, pool_key: str, target: str, objective: str) -> LiveModel | None:
        return self.held(model_key(pool_key, target, objective))

    def held(self, key: str) -> LiveModel | None:
        """The live model of a model key (:func:`contract.model_update.model_key`)."""
        return self._models.get(key)

    def next_version(self, pool_key: str, target: str, objective: str) -> int:
        held = self.get(pool_key, target, objective)
        return 1 if held is None else held.version + 1

    def versions(self) -> dict[str, int]:
        return {key: model.version for key, model in self._models.items()}
