"""Replaying the model topic verifies only the newest acceptable version of each model."""

import pytest

from headroom.predictor.metrics import PredictorMetrics
from headroom.predictor.replay import Replay
from headroom.predictor.runtime import ApplyOutcome, ModelRuntime
from tests.keys import TRUST
from tests.predictor.models import message, train


@pytest.fixture(scope="module")
def booster():
    return train(seed=1, trees=5)


def test_of_many_versions_only_the_newest_is_verified(booster):
    runtime = ModelRuntime(trust=TRUST)
    replay = Replay(runtime)
    for version in range(1, 31):
        assert replay.add(message(booster, version)) is None
    assert replay.add(None) is None  # a tombstone: nothing to serve, counted
    assert runtime.live() == []  # nothing is served before the replay ends
    results = replay.finish()
    assert [(r.outcome, r.version) for r in results] == [(ApplyOutcome.APPLIED, 30)]
    assert runtime.applied == 1 and runtime.stale == 29 and runtime.version("pool-a", "ttft", "mean") == 30
    assert replay.outcomes == {("applied", ""): 1, ("stale", ""): 29, ("tombstone", ""): 1}  # each message once


def test_a_newest_version_that_fails_verification_falls_back_to_the_one_before(booster):
    runtime = ModelRuntime(trust=TRUST, max_version_jump=5)
    replay = Replay(runtime)
    replay.add(message(booster, 1))
    replay.add(message(booster, 2))
    assert replay.add(message(booster, 900)).reason == "version"  # too far ahead of 2: rejected in topic order
    replay.add(message(booster, 3, feature_schema="another-schema"))  # screened in, fails verification
    outcomes = [(r.outcome, r.version, r.reason) for r in replay.finish()]
    assert outcomes == [(ApplyOutcome.REJECTED, 3, "schema"), (ApplyOutcome.APPLIED, 2, None)]
    assert runtime.rejected == {"version": 1, "schema": 1} and runtime.version("pool-a", "ttft", "mean") == 2
    assert replay.outcomes == {("applied", ""): 1, ("stale", ""): 1, ("rejected", "version"): 1,
                               ("rejected", "schema"): 1}
    metrics = PredictorMetrics(runtime)
    metrics.replayed(replay.outcomes)
    assert {key: metrics.registry.get_sample_value("headroom_predictor_replayed_updates_total",
                                                   {"outcome": key[0], "reason": key[1]})
            for key in replay.outcomes} == replay.outcomes
