import pytest

from headroom.trainer.drift import ErrorDriftDetector
from headroom.trainer.policy import RetrainPolicy, RetrainRule

RULE = RetrainRule(interval_s=10.0, min_samples=100, drift_cooldown_s=2.0)


def trained_policy(at: float = 0.0) -> RetrainPolicy:
    policy = RetrainPolicy(RULE, ErrorDriftDetector())
    policy.trained(at)
    return policy


def drifted(policy: RetrainPolicy) -> RetrainPolicy:
    for i in range(2000):
        policy.observe(0.02 if i < 1000 else 0.8)
    assert policy.drift_reason is not None
    return policy


@pytest.mark.parametrize(("make", "now", "rows", "admitted", "due"), [
    pytest.param(lambda: RetrainPolicy(RULE, ErrorDriftDetector()), 0.0, 99, 0, None, id="too-few-samples"),
    pytest.param(lambda: RetrainPolicy(RULE, ErrorDriftDetector()), 0.0, 100, 0, "first", id="first"),
    pytest.param(trained_policy, 9.9, 500, 10, None, id="before-interval"),
    pytest.param(trained_policy, 10.0, 500, 10, "periodic", id="interval-elapsed"),
    pytest.param(trained_policy, 30.0, 500, 0, None, id="nothing-new"),
    pytest.param(lambda: drifted(trained_policy()), 1.0, 500, 0, None, id="drift-in-cooldown"),
    pytest.param(lambda: drifted(trained_policy()), 2.0, 500, 0, "drift", id="drift"),
    pytest.param(lambda: drifted(trained_policy()), 2.0, 50, 0, None, id="drift-but-too-few-samples"),
])
def test_due(make, now, rows, admitted, due):
    policy = make()
    policy.admitted(admitted)
    assert policy.due(now, rows) == due


def test_training_answers_the_drift_and_resets_counters():
    policy = drifted(trained_policy())
    policy.admitted(7)
    reason = policy.trained(5.0)
    assert reason is not None and "adwin detected drift" in reason
    assert policy.drift_reason is None and policy.admitted_since_training == 0
    assert policy.due(6.0, 500) is None


def test_an_unanswered_drift_is_retried_a_few_times():
    policy = drifted(trained_policy())
    reasons = []
    for attempt in range(5):
        now = 10.0 * (attempt + 1)
        if policy.due(now, 500) == "drift":
            reasons.append(policy.trained(now))
            policy.unanswered(reasons[-1])
    assert len(reasons) == RULE.drift_retries


def test_a_drift_detected_while_a_drift_training_ran_keeps_its_own_retries():
    policy = drifted(trained_policy())
    first = policy.trained(2.0)
    for _ in range(2000):  # the detector fires again before the training's outcome is known
        if policy.observe(0.02 if policy.detector.recent_error > 0.5 else 0.8):
            break
    newer = policy.drift_reason
    assert newer is not None
    policy.unanswered(first)
    assert policy.drift_reason == newer
    retries = []
    for attempt in range(5):
        now = 10.0 * (attempt + 1)
        if policy.due(now, 500) == "drift":
            retries.append(policy.trained(now))
            policy.unanswered(retries[-1])
    assert len(retries) == RULE.drift_retries
