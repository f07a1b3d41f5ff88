"""Every benchmark module imports: a benchmark run by hand now and then must not rot with the code it measures."""

import importlib
import pkgutil

import pytest

import headroom.benchmarks

MODULES = sorted(m.name for m in pkgutil.walk_packages(headroom.benchmarks.__path__, "headroom.benchmarks."))


def test_the_benchmarks_are_found():
    assert "headroom.benchmarks.autoscale_guide" in MODULES and len(MODULES) > 20


@pytest.mark.parametrize("name", MODULES)
def test_a_benchmark_module_imports(name):
    importlib.import_module(name)
