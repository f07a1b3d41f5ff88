import dataclasses

import pytest

from contract.features import FEATURE_SCHEMA
from contract.model_update import decode_update, encode_update
from tests.trainer.synthetic import samples_of, synthetic_records
from trainer.live import LiveModels, live_model
from trainer.params import TrainParams
from trainer.rounds import RoundSpec, train_round

PARAMS = [TrainParams(n_trees=40, learning_rate=0.2),
          TrainParams(objective="quantile", n_trees=40, learning_rate=0.2)]
SPEC = RoundSpec(holdout_fraction=0.2, tolerance=0.02)


@pytest.fixture(scope="module")
def first_round():
    samples = samples_of(synthetic_records(2000, seed=5), "ttft")
    live = LiveModels()
    return samples, live, train_round("pool-a", "ttft", samples, live, PARAMS, SPEC, now=1.0)


def test_first_round_promotes_version_1_of_each_objective(first_round):
    _, _, outcomes = first_round
    assert [(o.objective, o.decision.promote, o.update.version) for o in outcomes] == [
        ("mean", True, 1), ("quantile", True, 1)]
    update = decode_update(encode_update(outcomes[1].update))
    assert update.key == "pool-a/ttft/quantile" and update.quantile == 0.9
    assert update.feature_schema == FEATURE_SCHEMA and update.model_format == "ubj"
    assert update.holdout_metrics["rows"] == update.window_stats["holdout_rows"] > 0
    assert 0.7 < update.holdout_metrics["coverage"] <= 1.0
    assert 0.0 < outcomes[0].update.holdout_metrics["mape"] < 0.15


def test_a_worse_candidate_is_rejected_and_versions_only_grow(first_round):
    samples, _, outcomes = first_round
    live = LiveModels()
    for outcome in outcomes:
        live.offer(live_model(outcome.update, outcome.booster))
    weak = [dataclasses.replace(p, n_trees=2, max_depth=1) for p in PARAMS]
    rejected = train_round("pool-a", "ttft", samples, live, weak, SPEC, now=2.0)
    assert [o.decision.promote for o in rejected] == [False, False]
    assert all(o.update is None and o.live_version == 1 for o in rejected)
    again = train_round("pool-a", "ttft", samples, live, PARAMS, SPEC, now=3.0, drift_reason="test drift")
    assert [o.update.version for o in again] == [2, 2]
    assert again[0].update.drift_reason == "test drift"


def test_a_model_with_another_schema_counts_only_for_versions(first_round):
    samples, _, outcomes = first_round
    foreign = dataclasses.replace(outcomes[0].update, feature_schema="v0:other", version=7)
    live = LiveModels([foreign])
    assert live.get("pool-a", "ttft", "mean").booster is None
    fresh = train_round("pool-a", "ttft", samples, live, PARAMS[:1], SPEC, now=4.0)
    assert fresh[0].decision.reason == "first version" and fresh[0].update.version == 8
