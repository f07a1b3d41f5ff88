import math

import pytest

from headroom.sim.results import quantile


@pytest.mark.parametrize("values, q, expected", [
    ([], 0.5, math.nan),
    ([7.0], 0.99, 7.0),
    ([3.0, 1.0, 2.0, 4.0], 0.5, 2.0),  # the smallest value with half of them at or below it
    ([3.0, 1.0, 2.0, 4.0], 0.75, 3.0),
    (list(range(1, 101)), 0.99, 99),
    (list(range(1, 1001)), 0.99, 990),
    (list(range(1, 101)), 1.0, 100),
    (list(range(1, 101)), 0.0, 1),
], ids=["empty", "single", "median", "upper-quartile", "p99-of-100", "p99-of-1000", "max", "min"])
def test_quantile_is_nearest_rank(values, q, expected):
    result = quantile(values, q)
    assert (math.isnan(result) and math.isnan(expected)) or result == expected
