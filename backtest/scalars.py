"""Single numbers read out of polars columns, checked: polars types an aggregate (``min``, ``max``, ``mean``,
``sum``) as any value a column could hold, so the backtest reads them here and gets a float or a clear error.
"""

from __future__ import annotations

import polars as pl


def maybe_number(value: object, what: str) -> float | None:
    """``value`` (an aggregate of a numeric column) as a float; None when the column held none (empty, all null)."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    raise TypeError(f"{what} is {value!r} ({type(value).__name__}), not a number")


def number(value: object, what: str) -> float:
    """:func:`maybe_number` of a column that must hold a value."""
    found = maybe_number(value, what)
    if found is None:
        raise ValueError(f"{what} is missing: the column holds no value")
    return found


def column_min(frame: pl.DataFrame, column: str) -> float | None:
    return maybe_number(frame.get_column(column).min(), f"the smallest {column}")


def column_max(frame: pl.DataFrame, column: str) -> float | None:
    return maybe_number(frame.get_column(column).max(), f"the largest {column}")
