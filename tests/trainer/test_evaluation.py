import math

import numpy as np
import pytest

from headroom.trainer.evaluation import score


@pytest.mark.parametrize(("actual", "predicted", "mae", "mape", "pinball", "coverage"), [
    pytest.param([100.0, 100.0], [100.0, 100.0], 0.0, 0.0, 0.0, 1.0, id="perfect"),
    pytest.param([100.0, 200.0], [110.0, 180.0], 15.0, 0.1, 0.5 * (0.1 * 10 + 0.9 * 20), 0.5, id="mixed"),
    pytest.param([100.0], [50.0], 50.0, 0.5, 45.0, 0.0, id="under-predicts"),
    pytest.param([0.0], [0.5], 0.5, 0.5, 0.05, 1.0, id="zero-actual-floored"),
])
def test_score(actual, predicted, mae, mape, pinball, coverage):
    m = score(np.array(actual), np.array(predicted), quantile=0.9)
    assert (m.mae, m.mape, m.pinball, m.coverage) == pytest.approx((mae, mape, pinball, coverage))
    assert m.rows == len(actual)


def test_empty_score_is_nan_with_no_rows():
    m = score(np.zeros(0), np.zeros(0))
    assert m.rows == 0 and math.isnan(m.mae)


def test_shapes_must_match():
    with pytest.raises(ValueError, match="differ in shape"):
        score(np.zeros(2), np.zeros(3))
