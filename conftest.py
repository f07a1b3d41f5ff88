"""The test session's process-wide settings (:mod:`headroom.process`), applied as the ``headroom`` command
applies them, before any test or doctest module loads XGBoost or numba."""

from headroom.process import configure

configure()
