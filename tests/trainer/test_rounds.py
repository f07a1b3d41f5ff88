import dataclasses

import numpy as np
import pytest

from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.model_update import decode_update, encode_update
from headroom.trainer.calibration import fit_calibrated_quantile
from headroom.trainer.fit import Matrices, fit, model_bytes
from headroom.trainer.holdout import split
from headroom.trainer.live import LiveModels, live_model
from headroom.trainer.params import TrainParams
from headroom.trainer.rounds import MIN_GATE_ROWS, RoundSpec, train_round
from headroom.trainer.samples import Samples
from tests.keys import TEST_KEY, TRUST
from tests.trainer.synthetic import samples_of, synthetic_records

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
    update = decode_update(TEST_KEY.sign(encode_update(outcomes[1].update)), TRUST)
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
    newer = samples_of(synthetic_records(2000, seed=15, slowdown=1.5, start_ts=samples.times.max() + 1.0), "ttft")
    again = train_round("pool-a", "ttft", newer, live, PARAMS, SPEC, now=3.0, drift_reason="test drift")
    assert [o.update.version for o in again] == [2, 2]
    assert again[0].update.drift_reason == "test drift"


def test_a_model_with_another_schema_counts_only_for_versions(first_round):
    samples, _, outcomes = first_round
    foreign = dataclasses.replace(outcomes[0].update, feature_schema="v0:other", version=7)
    live = LiveModels([foreign])
    assert live.get("pool-a", "ttft", "mean").booster is None
    fresh = train_round("pool-a", "ttft", samples, live, PARAMS[:1], SPEC, now=4.0)
    assert fresh[0].decision.reason == "first version" and fresh[0].update.version == 8


def test_updates_declare_the_transform_their_booster_was_trained_with(first_round):
    _, _, outcomes = first_round
    assert [o.update.output_transform for o in outcomes] == ["log", "log"]
    assert live_model(outcomes[0].update).booster is not None
    mislabelled = dataclasses.replace(outcomes[0].update, output_transform="identity", version=3)
    live = LiveModels([mislabelled])
    assert live.get("pool-a", "ttft", "mean").booster is None and live.next_version("pool-a", "ttft", "mean") == 4


def test_quantile_candidates_are_calibrated_on_newest_training_rows_and_say_so(first_round):
    _, _, outcomes = first_round
    mean, quantile = (o.update.window_stats for o in outcomes)
    assert "calibration_rows" not in mean
    assert 0 < quantile["calibration_rows"] < quantile["train_rows"]
    assert isinstance(quantile["calibration_shift"], float)
    samples, _, _ = first_round
    off = train_round("pool-a", "ttft", samples, LiveModels(), PARAMS[1:],
                      dataclasses.replace(SPEC, calibration_fraction=0.0), now=5.0)
    assert "calibration_rows" not in off[0].update.window_stats


def test_a_promoted_candidate_is_published_refitted_on_its_holdout_rows_too(first_round):
    samples, _, outcomes = first_round
    assert all(o.update.window_stats["refit_rows"] == len(samples) for o in outcomes)
    as_fitted = train_round("pool-a", "ttft", samples, LiveModels(), PARAMS[:1],
                            dataclasses.replace(SPEC, refit_promoted=False), now=6.0)[0]
    assert "refit_rows" not in as_fitted.update.window_stats
    assert as_fitted.update.holdout_metrics == outcomes[0].update.holdout_metrics  # the candidate's metrics
    assert as_fitted.update.model != outcomes[0].update.model


def test_the_gate_compares_on_holdout_rows_the_live_version_never_saw(first_round):
    samples, _, outcomes = first_round
    live = LiveModels()
    for outcome in outcomes:
        live.offer(live_model(outcome.update, outcome.booster))  # refitted on every row of `samples`
    newer = samples_of(synthetic_records(1000, seed=16, start_ts=samples.times.max() + 1.0), "ttft")
    both = Samples(raw=np.vstack([samples.raw, newer.raw]), values=np.r_[samples.values, newer.values],
                   times=np.r_[samples.times, newer.times], strata=np.r_[samples.strata, newer.strata])
    judged = train_round("pool-a", "ttft", both, live, PARAMS[:1], SPEC, now=7.0)[0]
    _, holdout = split(both, SPEC.holdout_fraction)
    unseen = int((holdout.times > samples.times.max()).sum())
    assert MIN_GATE_ROWS <= judged.live.rows == unseen < judged.candidate.rows == len(holdout)
    stale = train_round("pool-a", "ttft", samples, live, PARAMS[:1], SPEC, now=8.0)[0]
    assert stale.live.rows == stale.candidate.rows  # nothing unseen: the whole holdout


def test_fits_sharing_a_matrix_make_the_models_each_would_make_on_its_own(first_round):
    samples, _, outcomes = first_round
    mean, quantile = PARAMS
    alone = [fit(samples, mean, "ttft"),
             fit_calibrated_quantile(samples, quantile, SPEC.calibration_fraction, "ttft").booster]
    assert [o.update.model for o in outcomes] == [model_bytes(b) for b in alone]  # the round's refits
    train, _ = split(samples, SPEC.holdout_fraction)
    shared = Matrices("ttft")
    for rows in (train, samples, train):  # the candidates, their refits, and again on a matrix already sketched
        for params in PARAMS:
            assert model_bytes(fit(rows, params, "ttft", shared)) == model_bytes(fit(rows, params, "ttft"))
    with pytest.raises(ValueError, match="made for target 'ttft'"):
        fit(samples, mean, "e2e", shared)
