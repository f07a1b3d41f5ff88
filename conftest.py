"""The test session's process-wide settings and its doctests.

Process-wide settings (:mod:`headroom.process`) are applied as the ``headroom`` command applies them,
before any test or doctest module loads XGBoost.

Every product module whose docstrings carry examples (``>>>``) is collected as doctests, imported under
its installed name (``contract/settings.py`` as ``headroom.contract.settings``), so a module and the
metrics it registers load once whether a test or a doctest imports it first.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from _pytest.doctest import DoctestModule

from headroom.process import configure

configure()

ROOT = Path(__file__).resolve().parent


def installed_name(path: Path) -> str | None:
    """``headroom.<folder>.<module>`` for a source file of the product, None for anything else."""
    if not path.resolve().is_relative_to(ROOT):
        return None
    parts = path.resolve().relative_to(ROOT).with_suffix("").parts
    if len(parts) < 2:
        return None
    package = "headroom" if parts[0] == "headroom" else f"headroom.{parts[0]}"
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None or Path(spec.origin).parent != ROOT / parts[0]:
        return None
    inner = parts[1:-1] if parts[-1] == "__init__" else parts[1:]
    return ".".join((package, *inner))


class InstalledModuleDoctests(DoctestModule):
    """The doctests of one product module, imported by its installed name."""

    def _getobj(self) -> ModuleType:
        name = installed_name(self.path)
        assert name is not None
        return importlib.import_module(name)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix != ".py" or b">>> " not in file_path.read_bytes() or installed_name(file_path) is None:
        return None
    return InstalledModuleDoctests.from_parent(parent, path=file_path)
