"""Single numbers read out of polars columns: a float, None for a column without values, or a clear error."""

import polars as pl
import pytest

from headroom.backtest.scalars import column_max, column_min, maybe_number, number


@pytest.mark.parametrize(("column", "smallest", "largest"), [
    pytest.param(pl.Series("x", [3.5, 1.0, 2.0]), 1.0, 3.5, id="floats"),
    pytest.param(pl.Series("x", [4, 7], dtype=pl.Int64), 4.0, 7.0, id="ints-as-floats"),
    pytest.param(pl.Series("x", [None, 2.0]), 2.0, 2.0, id="nulls-skipped"),
    pytest.param(pl.Series("x", [], dtype=pl.Float64), None, None, id="empty"),
    pytest.param(pl.Series("x", [None, None], dtype=pl.Float64), None, None, id="all-null"),
])
def test_the_smallest_and_largest_of_a_column(column, smallest, largest):
    frame = pl.DataFrame([column])
    assert column_min(frame, "x") == smallest and column_max(frame, "x") == largest
    assert all(type(v) is float for v in (column_min(frame, "x"), column_max(frame, "x")) if v is not None)


def test_the_mean_and_sum_of_a_boolean_column_are_numbers():
    met = pl.Series([True, False, True, True])
    assert number(met.mean(), "attainment") == 0.75 and number(met.sum(), "met") == 3.0


def test_a_value_that_is_not_a_number_is_named_in_the_error():
    with pytest.raises(TypeError, match=r"the smallest pool_key is 'pool-a' \(str\), not a number"):
        column_min(pl.DataFrame({"pool_key": ["pool-b", "pool-a"]}), "pool_key")


def test_a_required_number_of_an_empty_column_is_an_error():
    assert maybe_number(None, "the first arrival_ts") is None
    with pytest.raises(ValueError, match="the first arrival_ts is missing"):
        number(pl.Series([], dtype=pl.Float64).min(), "the first arrival_ts")
