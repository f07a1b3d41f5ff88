"""contract.model_update.load_update: the checks every consumer makes before it uses a model."""

import numpy as np
import pytest
import xgboost

from headroom.contract.features import FEATURE_NAMES, FEATURE_SCHEMA
from headroom.contract.model_update import RejectedUpdate, load_update, make_update


def _booster(transform: str | None = None) -> xgboost.Booster:
    rows = np.random.default_rng(0).uniform(0, 1, (50, len(FEATURE_NAMES)))
    booster = xgboost.train({"nthread": 1}, xgboost.DMatrix(rows, label=rows[:, 0]), 2)
    if transform:
        booster.set_attr(headroom_output_transform=transform)
    return booster


def _update(model: bytes, **overrides):
    fields = dict(version=1, pool_key="pool-a", target="ttft", objective="mean", feature_schema=FEATURE_SCHEMA,
                  model_format="ubj", created_at=0.0)
    return make_update(model=model, **{**fields, **overrides})


def test_a_good_update_loads_on_one_thread():
    booster = load_update(_update(bytes(_booster("log").save_raw("ubj")), output_transform="log"))
    assert booster.attr("headroom_output_transform") == "log"
    assert booster.num_boosted_rounds() == 2


@pytest.mark.parametrize("model, overrides, reason, message", [
    (None, {"feature_schema": "v0:a,b"}, "schema", "does not match the serving schema"),
    (b"not a model", {}, "model", "XGBoost cannot load"),
    (None, {"output_transform": "log"}, "transform", "trained with 'identity'"),
], ids=["schema", "model", "transform"])
def test_what_a_consumer_must_not_use_is_rejected_with_its_reason(model, overrides, reason, message):
    raw = model if model is not None else bytes(_booster().save_raw("ubj"))
    with pytest.raises(RejectedUpdate, match=message) as caught:
        load_update(_update(raw, **overrides))
    assert caught.value.reason == reason
