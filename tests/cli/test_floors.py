"""The floors of docs/architecture.md, and the router's rooms: the tree keeps them, and the import-linter run of `make lint` fails on an
import against them (on a copy of the tree laid out as `make lint` lays it out, with the import added)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from headroom.cli.typecheck_tree import ROOT, lay_out

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """What `make lint` runs: import-linter on the laid-out tree, with the project's contracts."""
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo", str(ROOT / "pyproject.toml")], cwd=tree,
                          capture_output=True, text=True, timeout=120)


def test_the_tree_keeps_its_floors(tmp_path):
    lay_out(tmp_path)
    result = lint_imports(tmp_path)
    assert result.returncode == 0 and "floors KEPT" in result.stdout, result.stdout + result.stderr
    assert "router rooms KEPT" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("module, imported, contract", [
    pytest.param("router/framework/engine.py", "headroom.router.control.service", "router rooms",
                 id="the-framework-imports-request-control"),
    pytest.param("router/state/pool.py", "headroom.router.fronts.proxy", "router rooms", id="state-imports-a-front"),
    pytest.param("router/http/client.py", "headroom.router.framework.roles", "router rooms",
                 id="independent-router-rooms"),
    pytest.param("contract/slo.py", "headroom.kafka_clients", "floors", id="contract-imports-the-base-above-it"),
    pytest.param("predictor/runtime.py", "headroom.llmd.sidecar", "floors", id="a-room-imports-a-floor-above"),
    pytest.param("router/framework/engine.py", "headroom.sim.pool", "floors", id="independent-rooms-of-one-floor"),
])
def test_an_import_against_the_floors_fails_the_lint(tmp_path, module, imported, contract):
    lay_out(tmp_path)
    copy = tmp_path / "headroom" / module
    source = copy.read_text()
    copy.unlink()  # the link: the copy gets the import, the checkout stays as it is
    copy.write_text(f"{source}\nimport {imported}  # against the floors\n")
    result = lint_imports(tmp_path)
    importer = "headroom." + module.removesuffix(".py").replace("/", ".")
    assert result.returncode == 1 and f"{contract} BROKEN" in result.stdout, result.stdout + result.stderr
    assert f"{importer} -> {imported}" in result.stdout, result.stdout


def test_a_module_on_no_floor_fails_the_lint(tmp_path):
    lay_out(tmp_path)
    (tmp_path / "headroom" / "loose.py").write_text('"""A new module nobody placed on a floor."""\n')
    result = lint_imports(tmp_path)
    assert result.returncode != 0 and "headroom.loose" in result.stdout + result.stderr, result.stdout + result.stderr
