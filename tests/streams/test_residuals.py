import pytest

from streams.residuals import record_residual, residual
from tests.contract.records import valid_record


@pytest.mark.parametrize(("actual", "predicted", "error", "relative"), [
    pytest.param(100.0, 100.0, 0.0, 0.0, id="exact"),
    pytest.param(200.0, 100.0, 100.0, 0.5, id="twice-slower"),
    pytest.param(50.0, 100.0, -50.0, 1.0, id="twice-faster-clipped"),
    pytest.param(0.2, 0.7, -0.5, 0.5, id="sub-millisecond-floored"),
])
def test_residual(actual, predicted, error, relative):
    found = residual(actual, predicted)
    assert found.error == pytest.approx(error)
    assert found.relative == pytest.approx(relative)


@pytest.mark.parametrize(("changes", "target", "error"), [
    pytest.param({}, "ttft", 10.0, id="streaming-ttft"),
    pytest.param({}, "tpot", -0.2, id="streaming-tpot"),
    pytest.param({}, "e2e", None, id="streaming-trains-no-e2e"),
    pytest.param({"predicted_ttft_ms": None}, "ttft", None, id="no-prediction"),
    pytest.param({"stream": False, "ttft_ms": None, "tpot_ms": None, "predicted_e2e_ms": 2100.0}, "e2e", -101.0,
                 id="non-streaming-e2e"),
    pytest.param({"stream": False, "ttft_ms": None, "tpot_ms": None}, "ttft", None, id="non-streaming-no-ttft"),
])
def test_record_residual(changes, target, error):
    found = record_residual(valid_record(**changes), target)
    assert (None if found is None else pytest.approx(found.error)) == error
