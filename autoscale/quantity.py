"""Kubernetes resource quantities as integer milli-units, the unit the HPA controller computes in.

``Quantity.MilliValue()`` rounds up to the next milli-unit; so does :func:`to_milli`.

>>> to_milli("5"), to_milli("500m"), to_milli("1.5"), to_milli("2Ki"), to_milli(3)
(5000, 500, 1500, 2048000, 3000)
>>> format_milli(5000), format_milli(1500), format_milli(2867)
('5', '1500m', '2867m')
>>> format_decimal(5000), format_decimal(1500), format_decimal(2867)
('5', '1.5', '2.867')
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from headroom.autoscale.errors import SpecError

_SUFFIXES: dict[str, Fraction] = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}
_PATTERN = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


def to_fraction(value: str | int | float) -> Fraction:
    """The exact value of a quantity (``"1.5"``, ``"500m"``, ``"2Gi"``, ``"1e3"``, or a number)."""
    if isinstance(value, bool):
        raise SpecError(f"quantity {value!r} is a boolean, not a number")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SpecError(f"quantity {value!r} is not finite")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise SpecError(f"quantity {value!r} must be a string or a number")
    match = _PATTERN.match(value.strip())
    if match is None:
        raise SpecError(f"quantity {value!r} is not a Kubernetes quantity (e.g. '5', '500m', '1.5', '2Gi')")
    sign, number, exponent, suffix = match.groups()
    magnitude = Fraction(number)
    if exponent:
        magnitude *= Fraction(10) ** int(exponent[1:])
    else:
        magnitude *= _SUFFIXES[suffix or ""]
    return -magnitude if sign == "-" else magnitude


def to_milli(value: str | int | float) -> int:
    """Milli-units of a quantity, rounded up as ``Quantity.MilliValue()`` does."""
    return math.ceil(to_fraction(value) * 1000)


def format_milli(milli: int) -> str:
    """The shortest canonical quantity text for ``milli`` milli-units (``5000`` → ``"5"``)."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_decimal(milli: int) -> str:
    """``milli`` milli-units as a plain decimal (``1500`` → ``"1.5"``), for fields that take a float."""
    whole, part = divmod(milli, 1000)
    return str(whole) if not part else f"{whole}.{part:03d}".rstrip("0")
