"""The source tree as the ``headroom`` package, for mypy: ``python -m headroom.cli.typecheck_tree DIR``.

Every folder installs as ``headroom.<folder>`` (``package-dir`` in ``pyproject.toml``), which mypy cannot
follow from the source tree; this lays out ``DIR/headroom`` with a link to each folder (and to each module of
``headroom/`` itself), so mypy, given ``mypy_path = DIR``, checks the modules under their installed names.
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lay_out(tree: Path) -> None:
    folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(tree, ignore_errors=True)
    package = tree / "headroom"
    package.mkdir(parents=True)
    for module in (ROOT / folders["headroom"]).glob("*.py"):
        (package / module.name).symlink_to(module)
    for name, folder in folders.items():
        if name.count(".") == 1:  # headroom.<folder>; deeper entries lie inside a linked folder already
            (tree / name.replace(".", "/")).symlink_to(ROOT / folder)


if __name__ == "__main__":
    lay_out(Path(sys.argv[1]))
