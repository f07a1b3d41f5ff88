import pytest

from headroom.trainer.evaluation import HoldoutMetrics
from headroom.trainer.gate import decide


def metrics(mae: float, pinball: float = 1.0, rows: int = 50) -> HoldoutMetrics:
    return HoldoutMetrics(rows=rows, mae=mae, mape=0.1, pinball=pinball, coverage=0.9, quantile=0.9)


@pytest.mark.parametrize(("candidate", "live", "objective", "tolerance", "promote", "reason"), [
    pytest.param(metrics(10.0), None, "mean", 0.0, True, "first version", id="first-version"),
    pytest.param(metrics(9.0), metrics(10.0), "mean", 0.0, True, "<=", id="better"),
    pytest.param(metrics(10.0), metrics(10.0), "mean", 0.0, True, "<=", id="equal"),
    pytest.param(metrics(10.1), metrics(10.0), "mean", 0.02, True, "<=", id="worse-within-tolerance"),
    pytest.param(metrics(10.3), metrics(10.0), "mean", 0.02, False, ">", id="worse-beyond-tolerance"),
    pytest.param(metrics(5.0, pinball=3.0), metrics(10.0, pinball=2.0), "quantile", 0.0, False, ">",
                 id="quantile-judged-by-pinball"),
    pytest.param(metrics(50.0, pinball=1.0), metrics(10.0, pinball=2.0), "quantile", 0.0, True, "<=",
                 id="quantile-ignores-mae"),
    pytest.param(metrics(float("nan")), metrics(10.0), "mean", 0.0, False, "not finite", id="nan-candidate"),
    pytest.param(metrics(float("nan")), None, "mean", 0.0, False, "not finite", id="nan-first-candidate"),
    pytest.param(metrics(1.0, rows=0), metrics(1.0, rows=0), "mean", 0.0, False, "empty holdout",
                 id="nothing-to-compare"),
])
def test_gate(candidate, live, objective, tolerance, promote, reason):
    decision = decide(candidate, live, objective, tolerance)
    assert decision.promote is promote
    assert reason in decision.reason


def test_negative_tolerance_is_rejected():
    with pytest.raises(ValueError, match="tolerance"):
        decide(metrics(1.0), None, "mean", -0.1)
