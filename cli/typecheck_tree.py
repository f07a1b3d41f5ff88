"""The source tree as the ``headroom`` package, for mypy and import-linter:
``python -m headroom.cli.typecheck_tree DIR``.

Every folder installs as ``headroom.<folder>`` (``package-dir`` in ``pyproject.toml``), which neither tool can
follow from the source tree; this lays out ``DIR/headroom`` as installed — a real folder for each package and a
link to each of its modules — so mypy (``mypy_path = DIR``) and import-linter (``PYTHONPATH=DIR``) read the
modules under their installed names. Folders are real because import-linter does not walk linked ones.
"""

from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = ("*.py", "*.pyi")


def lay_out(tree: Path) -> None:
    folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(tree, ignore_errors=True)
    for name, folder in folders.items():
        source = ROOT / folder
        for pattern in MODULES:
            for module in source.rglob(pattern):
                if not (module.parent / "__init__.py").is_file():  # not in a package: not installed
                    continue
                link = tree / name.replace(".", "/") / module.relative_to(source)
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(module)


if __name__ == "__main__":
    lay_out(Path(sys.argv[1]))
