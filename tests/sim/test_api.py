from __future__ import annotations

import doctest

from headroom import sim


def test_package_docstring_example_runs() -> None:
    failures, tried = doctest.testmod(sim)
    assert tried > 0 and failures == 0


def test_public_names_resolve() -> None:
    for name in sim.__all__:
        assert getattr(sim, name) is not None
