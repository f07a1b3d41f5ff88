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


def test_a_tool_built_from_the_checkout_says_so_where_there_is_none(monkeypatch, tmp_path):
    from headroom.benchmarks import kube_api
    from headroom.errors import CommandError

    monkeypatch.setattr(kube_api, "ROOT", tmp_path)  # an installed wheel: no infra/ beside the package
    with pytest.raises(CommandError, match="building epp needs a source checkout of headroom"):
        kube_api.build_tool("epp")
