"""Regenerate the Python modules of every ``.proto`` of the project: ``python -m headroom.cli.protos``.

The protos are compiled as if the source tree were the ``headroom`` package (``-Iheadroom=<root>``), so a
generated service module imports its messages by their installed path (``headroom.router.proto.router_pb2``).
Needs grpcio-tools (a dev dependency); the generated modules are committed.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTOS = (Path("predictor/proto/prediction.proto"), Path("router/proto/router.proto"))


def main() -> int:
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as out:
        for proto in PROTOS:
            status: int = protoc.main(["grpc_tools.protoc", f"-Iheadroom={ROOT}", f"--python_out={out}",
                                  f"--pyi_out={out}", f"--grpc_python_out={out}", f"headroom/{proto}"])
            if status != 0:
                return status
            for generated in (Path(out) / "headroom" / proto.parent).glob("*_pb2*"):
                shutil.copy(generated, ROOT / proto.parent / generated.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
