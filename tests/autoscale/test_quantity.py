"""Kubernetes quantities in milli-units."""

from __future__ import annotations

import pytest

from headroom.autoscale.errors import SpecError
from headroom.autoscale.quantity import format_milli, to_milli


@pytest.mark.parametrize("text, milli", [
    ("5", 5000), ("500m", 500), ("1.5", 1500), ("0.0001", 1), ("2Ki", 2_048_000), ("1e3", 1_000_000),
    ("1k", 1_000_000), ("100u", 1), (7, 7000), (0.25, 250), ("-1", -1000), ("1.0005", 1001),
], ids=str)
def test_to_milli_rounds_up_like_milli_value(text, milli: int) -> None:
    assert to_milli(text) == milli


@pytest.mark.parametrize("bad", ["", "five", "1.2.3", "5 m", "1Xi", True, None, float("inf")], ids=repr)
def test_bad_quantities_are_rejected(bad) -> None:
    with pytest.raises(SpecError):
        to_milli(bad)


@pytest.mark.parametrize("milli", [5000, 1500, 2867, 1, 0])
def test_format_round_trips(milli: int) -> None:
    assert to_milli(format_milli(milli)) == milli
